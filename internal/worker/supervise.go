package worker

import (
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"time"
)

// SuperviseArg is the hidden first argument that makes simpletuner-workerd act
// as a job supervisor (see Supervise).
const SuperviseArg = "__supervise-job"

// Supervisor, when set (main sets it to [own binary, SuperviseArg]), wraps
// every job command. The supervisor leads the job's process group and holds a
// lifeline pipe from workerd: if workerd dies, even by SIGKILL, the pipe ends
// and the supervisor kills the whole group. Without it only the job's leader
// would die (Pdeathsig) and its children would keep the GPU while the
// orchestrator hands the job to another worker.
var Supervisor []string

// lifelineFD is where the supervisor finds the read end of the lifeline.
const lifelineFD = 3

// Supervise runs argv in the caller's process group and returns its exit
// status, re-raising the signal that killed it so workerd sees the same
// outcome as without a supervisor.
func Supervise(argv []string) int {
	if len(argv) == 0 {
		return 2
	}
	syscall.CloseOnExec(lifelineFD)
	// Stop signals go to the whole group; the job decides what to do with them,
	// the supervisor stays to report how it ended.
	signal.Ignore(syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	go func() {
		lifeline := os.NewFile(lifelineFD, "lifeline")
		buf := make([]byte, 1)
		for {
			if _, err := lifeline.Read(buf); err != nil {
				_ = syscall.Kill(0, syscall.SIGKILL) // workerd is gone: end the group, us included
				return
			}
		}
	}()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	signal.Reset(syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP) // the child gets default handlers
	if err := cmd.Start(); err != nil {
		os.Stderr.WriteString("simpletuner-workerd: cannot start job: " + err.Error() + "\n")
		return 127
	}
	signal.Ignore(syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	_ = cmd.Wait()
	ws, _ := cmd.ProcessState.Sys().(syscall.WaitStatus)
	if ws.Signaled() {
		signal.Reset(ws.Signal())
		_ = syscall.Kill(os.Getpid(), ws.Signal())
		time.Sleep(time.Second) // the signal ends us; this is not reached
		return 128 + int(ws.Signal())
	}
	return cmd.ProcessState.ExitCode()
}
