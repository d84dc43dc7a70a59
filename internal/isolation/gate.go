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

// The gate closes the gap a cgroup v1 controller leaves: a process enters
// the v2 cgroup at fork (CLONE_INTO_CGROUP), but the v1 cgroups only once it
// runs, so a trainer started straight away could allocate past memory_max or
// fork past tasks_max before it joined them. Where the machine has v1
// controllers the leader is therefore workerd itself, re-executed with
// GateArg: it waits on a pipe until workerd has moved it into every cgroup
// and only then executes the trainer, under the same pid and process group.

// Command is the command that starts argv as the job's leader: argv itself,
// or, where the job's limits live in v1 cgroups, argv behind the gate. The
// caller sets Dir, Env and the output, applies Apply to SysProcAttr, starts
// it and calls Started with its pid.
func (j *Job) Command(argv []string) *exec.Cmd {
	if j.cg == nil || len(j.cg.v1) == 0 || len(j.iso.gate) == 0 {
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
