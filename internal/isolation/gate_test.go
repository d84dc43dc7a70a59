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

// gatedCgroups is realCgroups with the test binary as the gate and limits
// that put the job in every v1 cgroup the machine has; mountinfo "" is the
// machine's own.
func gatedCgroups(t *testing.T, mountinfo string) *Isolator {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("making cgroups needs root (CI runs as root)")
	}
	cfg := Config{Mode: ModeCgroup, Gate: []string{os.Args[0], GateArg}, Log: slog.New(slog.DiscardHandler),
		MountInfo: mountinfo, Limits: Limits{MemoryMax: 256 << 20, TasksMax: 100}}
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

// startSlowly starts argv as job's leader and lets a moment pass before
// Started, as a busy workerd would: a leader that ran before its walls were
// up shows it.
func startSlowly(t *testing.T, job *Job, argv []string, env []string) (cmd *exec.Cmd, stdout, stderr *bytes.Buffer) {
	t.Helper()
	stdout, stderr = &bytes.Buffer{}, &bytes.Buffer{}
	cmd = job.Command(argv)
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = stdout, stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{}
	job.Apply(cmd.SysProcAttr)
	if err := cmd.Start(); err != nil {
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
// every cgroup of its job: the gate holds it until workerd moved it into the
// v1 ones, however long workerd takes.
func TestTrainerStartsInsideEveryCgroup(t *testing.T) {
	iso := gatedCgroups(t, "")
	if iso.LaunchPath() != LaunchGate {
		t.Skipf("this machine has no v1 memory or pids controller: jobs start by %s", iso.LaunchPath())
	}
	job, err := iso.Start("j_gate", 1, t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer job.Finish(nil)
	_, out, _ := startSlowly(t, job, []string{"cat", "/proc/self/cgroup"}, nil)
	joined := 0
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 || !(parts[1] == "" || strings.Contains(","+parts[1]+",", ",memory,") || strings.Contains(","+parts[1]+",", ",pids,")) {
			continue
		}
		joined++
		if !strings.HasSuffix(parts[2], "/job-j_gate-1") {
			t.Errorf("the trainer started outside its cgroup: %s", line)
		}
	}
	if joined != 1+len(job.cg.v1) {
		t.Errorf("the trainer saw %d of its %d cgroups:\n%s", joined, 1+len(job.cg.v1), out)
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
	iso := gatedCgroups(t, "")
	if iso.LaunchPath() != LaunchGate {
		t.Skipf("this machine has no v1 memory or pids controller: jobs start by %s", iso.LaunchPath())
	}
	job, err := iso.Start("j_cgate", 1, t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer job.Finish(nil)
	_, out, stderr := startSlowly(t, job, []string{"sh", "-c", "echo trainer ran"}, []string{"GODEBUG=inittrace=1", "PATH=/usr/bin:/bin"})
	if strings.Contains(stderr.String(), "init ") || out.String() != "trainer ran\n" {
		t.Errorf("the gate started the Go runtime, or the trainer did not run:\nstdout %q\nstderr %s", out, stderr)
	}
}

// A gate whose start workerd abandons (it lets go of the pipe before
// Started) exits without running the trainer.
func TestAbandonedGateRunsNothing(t *testing.T) {
	iso := gatedCgroups(t, "")
	if iso.LaunchPath() != LaunchGate {
		t.Skipf("this machine has no v1 memory or pids controller: jobs start by %s", iso.LaunchPath())
	}
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
	iso := gatedCgroups(t, mi)
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
