package isolation

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"syscall"

	"golang.org/x/sys/unix"
)

// GateArg is the hidden first argument that makes simpletuner-workerd hold a
// job's leader until its walls are up (see RunGate).
const GateArg = "__job-gate"

// How a job's leader starts, in the order New prefers them:
//
//   - LaunchCloneIntoCgroup (a cgroup v2 machine): the trainer itself, forked
//     straight into its cgroup by clone3 with CLONE_INTO_CGROUP. Every limit
//     holds from its first instruction; there is nothing to wait for.
//   - LaunchCloneInV1 (a hybrid machine, where memory or pids are v1
//     controllers): a v1 cgroup cannot be named at fork, but a child starts
//     in the v1 cgroups of the thread that forked it. The forking thread
//     (locked to its goroutine, see GoLocked) steps into the job's v1
//     cgroups, forks the trainer into the v2 cgroup with CLONE_INTO_CGROUP,
//     and steps back: every limit holds from the trainer's first
//     instruction, at the cost of a few cgroup writes. The thread is never
//     workerd's main thread, whose cgroup decides where the memory of all of
//     workerd is charged.
//   - LaunchGate (a hybrid machine with tasks_max = 1, which the forking
//     thread would use up itself): the leader is a gate, workerd
//     re-executed with GateArg, forked into the v2 cgroup: it waits on a
//     pipe until workerd has moved it into every v1 cgroup and only then
//     executes the trainer, under the same pid and process group. In a cgo
//     build the gate is a C constructor that runs before the Go runtime
//     (gate_cgo.go); RunGate is the gate of other builds.
//   - LaunchProcessGroup (no writable cgroup v2): the trainer itself, in a
//     process group of its own.
const (
	LaunchCloneIntoCgroup = "clone-into-cgroup"
	LaunchCloneInV1       = "clone-in-v1-cgroups"
	LaunchGate            = "gate"
	LaunchProcessGroup    = "process-group"
)

// LaunchPath is how the leaders of jobs start here (see
// LaunchCloneIntoCgroup); each Job's LaunchPath says the same.
func (iso *Isolator) LaunchPath() string {
	if iso.h == nil {
		return LaunchProcessGroup
	}
	for c := range iso.h.v1 {
		if c != "pids" || iso.limits.TasksMax > 0 { // as makeJob joins them
			return iso.v1Path()
		}
	}
	return LaunchCloneIntoCgroup
}

// v1Path is how a job that joins v1 cgroups starts.
func (iso *Isolator) v1Path() string {
	_, pidsV1 := iso.h.v1["pids"]
	switch {
	case pidsV1 && iso.limits.TasksMax == 1 && len(iso.gate) > 0:
		return LaunchGate
	case pidsV1 && iso.limits.TasksMax == 1:
		return LaunchCloneIntoCgroup // joins its v1 cgroups once started
	}
	return LaunchCloneInV1
}

// LaunchPath is how the job's leader starts (see LaunchCloneIntoCgroup).
func (j *Job) LaunchPath() string {
	switch {
	case j.cg == nil:
		return LaunchProcessGroup
	case len(j.cg.v1) > 0:
		return j.iso.v1Path()
	}
	return LaunchCloneIntoCgroup
}

// GoLocked runs f in a goroutine locked to an OS thread that is not
// workerd's main thread, for the goroutine that starts a job's leader with
// StartLeader. The thread is given back when f returns true; false (it
// could not leave a job's cgroups) ends it with the goroutine.
func GoLocked(f func() (threadClean bool)) {
	go func() {
		runtime.LockOSThread()
		if unix.Gettid() == unix.Getpid() {
			// Holding the main thread, this goroutine makes sure the next
			// one locks another.
			locked := make(chan struct{})
			goLockedElsewhere(f, locked)
			<-locked
			runtime.UnlockOSThread()
			return
		}
		if f() {
			runtime.UnlockOSThread()
		}
	}()
}

// goLockedElsewhere is GoLocked's second try, while the first holds the
// main thread: it closes locked once it has a thread of its own.
func goLockedElsewhere(f func() bool, locked chan struct{}) {
	go func() {
		runtime.LockOSThread()
		close(locked)
		if f() {
			runtime.UnlockOSThread()
		}
	}()
}

// StartLeader runs start, which forks the job's leader (exec.Cmd.Start), so
// that the leader is inside every cgroup of the job from its first
// instruction: on LaunchCloneInV1, the calling thread (locked by GoLocked)
// is in the job's v1 cgroups while start forks. threadClean is false when
// the thread could not go back to workerd's own cgroups.
func (j *Job) StartLeader(start func() error) (threadClean bool, err error) {
	if j.LaunchPath() != LaunchCloneInV1 {
		return true, start()
	}
	if unix.Gettid() == unix.Getpid() {
		return true, errors.New("a job's leader may not be forked from workerd's main thread (see GoLocked)")
	}
	var entered []string
	for c, d := range j.cg.v1 {
		if err = writeFile(filepath.Join(d, "tasks"), "0"); err != nil {
			err = fmt.Errorf("joining the job's %s cgroup: %w", c, err)
			break
		}
		entered = append(entered, c)
	}
	if err == nil {
		err = start()
		j.forkedInV1 = err == nil
	}
	threadClean = true
	for _, c := range entered {
		// workerd's own cgroup of the controller holds the jobs' parent.
		home := filepath.Dir(j.iso.h.v1[c])
		if e := writeFile(filepath.Join(home, "tasks"), "0"); e != nil {
			threadClean = false
			j.iso.log.Error("a thread of workerd cannot leave a job's cgroup; it ends", "controller", c, "err", e)
		}
	}
	return threadClean, err
}

// Command is the command that starts argv as the job's leader: argv itself,
// or, where the job's limits live in v1 cgroups, argv behind the gate. The
// caller sets Dir, Env and the output, applies Apply to SysProcAttr, starts
// it and calls Started with its pid.
func (j *Job) Command(argv []string) *exec.Cmd {
	if j.LaunchPath() != LaunchGate || len(j.iso.gate) == 0 {
		return exec.Command(argv[0], argv[1:]...)
	}
	// Resolved here, as exec.Command would: a trainer that is not there
	// fails the start, not the job.
	path, err := exec.LookPath(argv[0])
	cmd := exec.Command(j.iso.gate[0], append(append(j.iso.gate[1:len(j.iso.gate):len(j.iso.gate)], path), argv...)...)
	if err != nil {
		cmd.Err = err
		return cmd
	}
	r, w, err := os.Pipe()
	if err != nil {
		cmd.Err = err
		return cmd
	}
	cmd.ExtraFiles = []*os.File{r} // fd 3 in the gate
	j.gateR, j.gateW = r, w
	return cmd
}

// openGate lets the leader execute the trainer: it is in every cgroup now.
func (j *Job) openGate() {
	if j.gateW != nil {
		_, _ = j.gateW.Write([]byte{1})
	}
	j.closeGate()
}

// closeGate lets go of the pipe; a leader still waiting then exits.
func (j *Job) closeGate() {
	if j.gateR != nil {
		j.gateR.Close()
		j.gateW.Close()
		j.gateR, j.gateW = nil, nil
	}
}

// RunGate is the gate's side: args are the trainer's path, then its argv.
// It waits for workerd's word on fd 3 and executes the trainer; it exits 1
// when workerd let go of the pipe without it (the start was abandoned).
func RunGate(args []string, stderr io.Writer) int {
	if len(args) < 2 {
		fmt.Fprintln(stderr, "simpletuner-workerd: "+GateArg+": want the trainer's path and argv")
		return 2
	}
	word := os.NewFile(3, "gate")
	b := make([]byte, 1)
	if n, _ := word.Read(b); n != 1 {
		fmt.Fprintln(stderr, "simpletuner-workerd: the job was abandoned before it started")
		return 1
	}
	word.Close()
	err := syscall.Exec(args[0], args[1:], os.Environ())
	fmt.Fprintf(stderr, "simpletuner-workerd: cannot start %s: %v\n", args[0], err)
	return 127
}
