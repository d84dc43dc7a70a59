package isolation

import (
	"bytes"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The test binary is the gate of the tests' jobs, as workerd is of real
// ones: in a cgo build its C constructor answers GateArg before this runs.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == GateArg {
		os.Exit(RunGate(os.Args[2:], os.Stderr))
	}
	os.Exit(m.Run())
}

// hybridCgroups is realCgroups with the test binary as the gate and limits
// that put the job in every v1 cgroup the machine has: tasksMax 1 makes
// the leader a gate. mountinfo "" is the machine's own.
func hybridCgroups(t *testing.T, mountinfo string, tasksMax int64) *Isolator {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("making cgroups needs root (CI runs as root)")
	}
	cfg := Config{Mode: ModeCgroup, Gate: []string{os.Args[0], GateArg}, Log: slog.New(slog.DiscardHandler),
		MountInfo: mountinfo, Limits: Limits{MemoryMax: 256 << 20, TasksMax: tasksMax}}
	if mountinfo != "" {
		cfg.ProcCgroup, cfg.Limits = "/proc/self/cgroup", Limits{}
	}
	iso, err := New(cfg)
	if err != nil {
		t.Fatalf("no writable cgroup v2 on this machine: %v", err)
	}
	t.Cleanup(iso.Close)
	return iso
}

// needPath skips unless jobs start by path here.
func needPath(t *testing.T, iso *Isolator, path string) {
	t.Helper()
	if got := iso.LaunchPath(); got != path {
		t.Skipf("jobs start by %s on this machine, not %s (no v1 memory or pids controller)", got, path)
	}
}

// startSlowly starts argv as job's leader as workerd does and lets a moment
// pass before Started, as a busy workerd would: a leader that ran before
// its walls were up shows it.
func startSlowly(t *testing.T, job *Job, argv []string, env []string) (cmd *exec.Cmd, stdout, stderr *bytes.Buffer) {
	t.Helper()
	stdout, stderr = &bytes.Buffer{}, &bytes.Buffer{}
	cmd = job.Command(argv)
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = stdout, stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{}
	job.Apply(cmd.SysProcAttr)
	started := make(chan error, 1)
	GoLocked(func() bool {
		clean, err := job.StartLeader(cmd.Start)
		started <- err
		return clean
	})
	if err := <-started; err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	job.Started(cmd.Process.Pid)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("%v: %v\n%s", argv, err, stderr)
	}
	return cmd, stdout, stderr
}

// On a hybrid machine the trainer's first instruction already runs inside
// every cgroup of its job, however long workerd takes after the fork:
// forked from a thread inside the job's v1 cgroups, or held by the gate
// until workerd moved it there.
func TestTrainerStartsInsideEveryCgroup(t *testing.T) {
	for _, c := range []struct {
		path     string
		tasksMax int64
	}{{LaunchCloneInV1, 100}, {LaunchGate, 1}} {
		t.Run(c.path, func(t *testing.T) {
			iso := hybridCgroups(t, "", c.tasksMax)
			needPath(t, iso, c.path)
			job, err := iso.Start("j_first", 1, t.TempDir(), nil)
			if err != nil {
				t.Fatal(err)
			}
			defer job.Finish(nil)
			cmd, out, _ := startSlowly(t, job, []string{"cat", "/proc/self/cgroup"}, nil)
			joined := 0
			for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
				parts := strings.SplitN(line, ":", 3)
				if len(parts) != 3 || !(parts[1] == "" || strings.Contains(","+parts[1]+",", ",memory,") || strings.Contains(","+parts[1]+",", ",pids,")) {
					continue
				}
				joined++
				if !strings.HasSuffix(parts[2], "/job-j_first-1") {
					t.Errorf("the trainer started outside its cgroup: %s", line)
				}
			}
			if joined != 1+len(job.cg.v1) {
				t.Errorf("the trainer saw %d of its %d cgroups:\n%s", joined, 1+len(job.cg.v1), out)
			}
			if gated := cmd.Path == os.Args[0]; gated != (c.path == LaunchGate) {
				t.Errorf("leader %s on %s", cmd.Path, c.path)
			}
		})
	}
}

// The thread that forked a job's leader from inside its v1 cgroups is back
// in workerd's own: no thread of this process is left in a job's cgroup,
// and the job's cgroups go with the job.
func TestForkingThreadLeavesJobCgroups(t *testing.T) {
	iso := hybridCgroups(t, "", 100)
	needPath(t, iso, LaunchCloneInV1)
	job, err := iso.Start("j_thread", 1, t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	startSlowly(t, job, []string{"true"}, nil)
	tasks, _ := filepath.Glob("/proc/self/task/*/cgroup")
	for _, f := range tasks {
		b, _ := os.ReadFile(f)
		if strings.Contains(string(b), "/job-j_thread-1") {
			t.Errorf("%s is still in the job's cgroups:\n%s", filepath.Dir(f), b)
		}
	}
	v1 := job.cg.v1
	job.Finish(nil)
	for c, d := range v1 {
		if _, err := os.Stat(d); !os.IsNotExist(err) {
			t.Errorf("the job's %s cgroup %s is left (%v)", c, d, err)
		}
	}
}

// GoLocked never hands workerd's main thread to a launch, whose thread
// steps into job cgroups (the main thread's memory cgroup is workerd's).
func TestGoLockedAvoidsMainThread(t *testing.T) {
	for range 20 {
		tid := make(chan int)
		GoLocked(func() bool { tid <- syscall.Gettid(); return true })
		if <-tid == os.Getpid() {
			t.Fatal("GoLocked ran on the main thread")
		}
	}
}

// In a cgo build the gate is C: the Go runtime of workerd never starts in
// it (a Go gate would print its package initialisation under
// GODEBUG=inittrace=1).
func TestGateRunsNoGoRuntime(t *testing.T) {
	arg, inC := cGate()
	if arg != GateArg {
		t.Fatalf("the C gate answers %q, the Go side starts it with %q", arg, GateArg)
	}
	if !inC {
		t.Skip("this build has no C gate (no cgo or no glibc): RunGate is the gate")
	}
	iso := hybridCgroups(t, "", 1)
	needPath(t, iso, LaunchGate)
	job, err := iso.Start("j_cgate", 1, t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer job.Finish(nil)
	_, out, stderr := startSlowly(t, job, []string{"echo", "trainer ran"}, []string{"GODEBUG=inittrace=1"})
	if strings.Contains(stderr.String(), "init ") || out.String() != "trainer ran\n" {
		t.Errorf("the gate started the Go runtime, or the trainer did not run:\nstdout %q\nstderr %s", out, stderr)
	}
}

// A gate whose start workerd abandons (it lets go of the pipe before
// Started) exits without running the trainer.
func TestAbandonedGateRunsNothing(t *testing.T) {
	iso := hybridCgroups(t, "", 1)
	needPath(t, iso, LaunchGate)
	job, err := iso.Start("j_abandon", 1, t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	cmd := job.Command([]string{"echo", "trainer ran"})
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{}
	job.Apply(cmd.SysProcAttr)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	job.closeGate()
	err = cmd.Wait()
	job.Finish(nil)
	if stdout.Len() != 0 || !strings.Contains(stderr.String(), "abandoned") || cmd.ProcessState.ExitCode() != 1 {
		t.Errorf("an abandoned gate: %v, stdout %q, stderr %q", err, stdout.String(), stderr.String())
	}
}

// On a cgroup v2 machine (here: this machine's mounts without its v1
// hierarchies) no gate runs: the trainer itself is forked straight into
// its cgroup, which it is in before workerd does anything after the fork.
func TestPureV2StartsStraightIntoCgroup(t *testing.T) {
	own, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	var v2only []string
	for _, line := range strings.Split(string(own), "\n") {
		if !strings.Contains(line, " - cgroup cgroup ") {
			v2only = append(v2only, line)
		}
	}
	mi := filepath.Join(t.TempDir(), "mountinfo")
	if err := os.WriteFile(mi, []byte(strings.Join(v2only, "\n")), 0o644); err != nil {
		t.Fatal(err)
	}
	iso := hybridCgroups(t, mi, 0)
	if got := iso.LaunchPath(); got != LaunchCloneIntoCgroup {
		t.Fatalf("launch path on cgroup v2 only: %s", got)
	}
	job, err := iso.Start("j_v2", 1, t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer job.Finish(nil)
	cmd, out, _ := startSlowly(t, job, []string{"cat", "/proc/self/cgroup"}, nil)
	if cmd.Path != "/usr/bin/cat" && cmd.Path != "/bin/cat" || job.LaunchPath() != LaunchCloneIntoCgroup {
		t.Errorf("the leader was %s (%s), not the trainer", cmd.Path, job.LaunchPath())
	}
	if !strings.Contains(out.String(), "0::"+strings.TrimPrefix(job.CgroupDir(), "/sys/fs/cgroup/unified")+"\n") {
		t.Errorf("the trainer did not start in %s:\n%s", job.CgroupDir(), out)
	}
}
