package isolation

import (
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/simpletuner/simpletuner-orchestration/internal/testutil"
)

func TestMountsAndMembership(t *testing.T) {
	dir := t.TempDir()
	mi := filepath.Join(dir, "mountinfo")
	os.WriteFile(mi, []byte(`31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
50 31 0:40 /some/root /mnt/with\040space rw - cgroup2 cgroup2 rw
`), 0o644)
	ms, err := mounts(mi)
	if err != nil || len(ms) != 4 {
		t.Fatalf("mounts: %v %+v", err, ms)
	}
	if ms[3].point != "/mnt/with space" || ms[3].root != "/some/root" {
		t.Fatalf("escaped mount point: %+v", ms[3])
	}
	pc := filepath.Join(dir, "cgroup")
	os.WriteFile(pc, []byte("9:name=systemd:/\n8:pids:/a\n4:memory:/process_api/x\n1:cpu,cpuacct:/\n0::/user.slice/u.service\n"), 0o644)
	own, err := membership(pc)
	if err != nil || own[""] != "/user.slice/u.service" || own["memory"] != "/process_api/x" || own["cpuacct"] != "/" {
		t.Fatalf("membership: %v %v", own, err)
	}
	if got := cgroupDir(ms[2], own[""]); got != "/sys/fs/cgroup/unified/user.slice/u.service" {
		t.Fatalf("cgroupDir = %s", got)
	}
	if got := cgroupDir(ms[3], "/some/root/svc"); got != "/mnt/with space/svc" {
		t.Fatalf("cgroupDir under a bind-mounted root = %s", got)
	}
}

func TestUIDPool(t *testing.T) {
	p, _ := newUIDPool(uidRange{100, 103}, "")
	a, _ := p.take("j_a", 0)
	b, _ := p.take("j_b", a) // its preference is taken: another one
	if a == b || !p.r.contains(a) || !p.r.contains(b) {
		t.Fatalf("take: %d %d", a, b)
	}
	again, _ := p.take("j_a", 0) // the same job id, a running attempt holds its uid: the next free one
	if again == a || again == b {
		t.Fatalf("two running jobs share uid %d", again)
	}
	p.release(a)
	if got, _ := p.take("j_c", a); got != a {
		t.Fatalf("a free preferred uid was not given: %d, want %d", got, a)
	}
	p.take("j_d", 0)
	if _, err := p.take("j_e", 0); err == nil {
		t.Fatal("a full pool gave a uid")
	}
}

// Two workerds on one machine share the range: the lock files keep them from
// giving the same uid to two running jobs, and a released uid is free again.
func TestUIDPoolAcrossWorkerds(t *testing.T) {
	lockFile := filepath.Join(t.TempDir(), "uids.lock")
	one, _ := newUIDPool(uidRange{100, 101}, lockFile)
	two, _ := newUIDPool(uidRange{100, 101}, lockFile)
	a, err1 := one.take("j_same", 0)
	b, err2 := two.take("j_same", 0) // the same job id hashes to the same start
	if err1 != nil || err2 != nil || a == b {
		t.Fatalf("two workerds gave out %d and %d (%v %v)", a, b, err1, err2)
	}
	if _, err := two.take("j_x", 0); err == nil {
		t.Fatal("a range fully held by two workerds gave a third uid")
	}
	one.release(a)
	if got, err := two.take("j_y", a); err != nil || got != a {
		t.Fatalf("a released uid was not free for the other workerd: %d %v", got, err)
	}
	// A workerd that dies gives its uids back.
	two.release(a)
	one.take("j_z", a)
	one.close()
	if got, err := two.take("j_w", a); err != nil || got != a {
		t.Fatalf("the uid of a closed pool stayed locked: %d %v", got, err)
	}
}

// realCgroups skips unless this machine lets the test make cgroups.
func realCgroups(t *testing.T) *Isolator {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("making cgroups needs root (CI runs as root)")
	}
	iso, err := New(Config{Mode: ModeCgroup, Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatalf("no writable cgroup v2 on this machine: %v", err)
	}
	t.Cleanup(iso.Close)
	return iso
}

// A job whose processes ignore SIGTERM, one of them escaped with setsid into
// a session of its own, ends whole: cgroup.kill reaches every process, and
// its cgroup is gone after Finish.
func TestCgroupEndsEscapers(t *testing.T) {
	iso := realCgroups(t)
	dir := t.TempDir()
	job, err := iso.Start("j_escape", 1, dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	cg := job.CgroupDir()
	script := `trap "" TERM INT HUP; setsid sh -c 'trap "" TERM INT HUP; echo $$ > escaped.pid; exec sleep 300' & sleep 300`
	cmd := exec.Command("/bin/sh", "-c", script)
	cmd.Dir = dir
	cmd.SysProcAttr = &syscall.SysProcAttr{}
	job.Apply(cmd.SysProcAttr)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	job.Started(cmd.Process.Pid)
	escaped := 0
	deadline := time.Now().Add(5 * time.Second)
	for escaped == 0 && time.Now().Before(deadline) {
		b, _ := os.ReadFile(filepath.Join(dir, "escaped.pid"))
		escaped, _ = strconv.Atoi(strings.TrimSpace(string(b)))
		time.Sleep(10 * time.Millisecond)
	}
	if escaped == 0 {
		t.Fatal("the escaper never started")
	}
	if sid, _ := unix.Getsid(escaped); sid != escaped {
		t.Fatalf("the escaper is not in a session of its own (sid %d)", sid)
	}
	job.Signal(syscall.SIGTERM)
	time.Sleep(100 * time.Millisecond)
	if !testutil.Running(escaped) {
		t.Fatal("the escaper died of a SIGTERM it ignores")
	}
	job.Kill()
	_ = cmd.Wait()
	job.Finish(nil)
	for _, pid := range []int{cmd.Process.Pid, escaped} {
		if testutil.Running(pid) {
			t.Errorf("pid %d survived the job", pid)
		}
	}
	if _, err := os.Stat(cg); !os.IsNotExist(err) {
		t.Errorf("the job's cgroup %s is still there (%v)", cg, err)
	}
}

// CPU time comes from the cgroup and counts every process of the job: it
// matches what the kernel charged the job's processes (the leader's rusage,
// which includes the burners it waited for), whatever else loads the machine.
func TestCgroupAccountsCPU(t *testing.T) {
	iso := realCgroups(t)
	dir := t.TempDir()
	job, err := iso.Start("j_burn", 1, dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Two processes do a fixed amount of work each.
	script := `burn() { i=0; while [ $i -lt 60000 ]; do i=$((i+1)); done; }; burn & burn; wait`
	cmd := exec.Command("/bin/bash", "-c", script)
	cmd.Dir = dir
	cmd.SysProcAttr = &syscall.SysProcAttr{}
	job.Apply(cmd.SysProcAttr)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	job.Started(cmd.Process.Pid)
	_ = cmd.Wait()
	ru := cmd.ProcessState.SysUsage().(*syscall.Rusage)
	charged := time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	u := job.Finish(nil)
	t.Logf("cgroup: cpu %s, peak memory %d bytes; rusage: cpu %s", u.CPU, u.PeakMemory, charged)
	if charged < 100*time.Millisecond {
		t.Fatalf("the burners used only %s: the test measures nothing", charged)
	}
	if u.CPU < charged*9/10 || u.CPU > charged*3/2+50*time.Millisecond {
		t.Fatalf("the cgroup counted %s; the processes were charged %s", u.CPU, charged)
	}
}

// A job kept from one of two "GPUs" cannot open its device file and still
// opens the other. The stand-ins are device files made here with the numbers
// of /dev/null and /dev/zero.
func TestJobCannotOpenOtherGPUs(t *testing.T) {
	iso := realCgroups(t)
	if iso.devicesErr != nil {
		t.Fatalf("this machine cannot filter a job's devices: %v", iso.devicesErr)
	}
	dir := t.TempDir()
	mine, other := filepath.Join(dir, "gpu0"), filepath.Join(dir, "gpu1")
	if err := unix.Mknod(mine, unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mknod(other, unix.S_IFCHR|0o666, int(unix.Mkdev(1, 5))); err != nil {
		t.Fatal(err)
	}
	run := func(name string, deny []string) string {
		job, err := iso.Start(name, 1, filepath.Join(dir, name), deny)
		if err != nil {
			t.Fatal(err)
		}
		script := `head -c 1 ` + mine + ` > /dev/null && echo mine-ok; head -c 1 ` + other + ` > /dev/null 2>&1 && echo other-opened || echo other-refused`
		cmd := exec.Command("/bin/sh", "-c", script)
		cmd.SysProcAttr = &syscall.SysProcAttr{}
		job.Apply(cmd.SysProcAttr)
		out, err := cmd.Output()
		job.Finish(nil)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return strings.TrimSpace(string(out))
	}
	if got := run("j_kept", []string{other}); got != "mine-ok\nother-refused" {
		t.Errorf("a job kept from gpu1: %q", got)
	}
	if got := run("j_free", nil); got != "mine-ok\nother-opened" {
		t.Errorf("a job given both: %q", got)
	}
}
