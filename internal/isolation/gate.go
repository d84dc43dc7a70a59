package isolation

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"syscall"
)

// GateArg is the hidden first argument that makes simpletuner-workerd hold a
// job's leader until its walls are up (see RunGate).
const GateArg = "__job-gate"

// How a job's leader starts, in the order New prefers them:
//
//   - LaunchCloneIntoCgroup (a cgroup v2 machine): the trainer itself, forked
//     straight into its cgroup by clone3 with CLONE_INTO_CGROUP. Every limit
//     holds from its first instruction; there is nothing to wait for.
//   - LaunchGate (a hybrid machine, where memory or pids are v1
//     controllers): a v1 cgroup can only be joined once the process exists,
//     so a trainer started straight away could allocate past memory_max or
//     fork past tasks_max before it joined them. The leader is therefore a
//     gate, workerd re-executed with GateArg, forked into the v2 cgroup: it
//     waits on a pipe until workerd has moved it into every v1 cgroup and
//     only then executes the trainer, under the same pid and process group.
//     In a cgo build the gate is a C constructor that runs before the Go
//     runtime (gate_cgo.go); RunGate is the gate of other builds.
//   - LaunchProcessGroup (no writable cgroup v2): the trainer itself, in a
//     process group of its own.
const (
	LaunchCloneIntoCgroup = "clone-into-cgroup"
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
		if len(iso.gate) > 0 && (c != "pids" || iso.limits.TasksMax > 0) { // as makeJob joins them
			return LaunchGate
		}
	}
	return LaunchCloneIntoCgroup
}

// LaunchPath is how the job's leader starts (see LaunchCloneIntoCgroup).
func (j *Job) LaunchPath() string {
	switch {
	case j.cg == nil:
		return LaunchProcessGroup
	case len(j.cg.v1) > 0 && len(j.iso.gate) > 0:
		return LaunchGate
	}
	return LaunchCloneIntoCgroup
}

// Command is the command that starts argv as the job's leader: argv itself,
// or, where the job's limits live in v1 cgroups, argv behind the gate. The
// caller sets Dir, Env and the output, applies Apply to SysProcAttr, starts
// it and calls Started with its pid.
func (j *Job) Command(argv []string) *exec.Cmd {
	if j.LaunchPath() != LaunchGate {
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
