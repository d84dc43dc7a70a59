package worker

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"sync"
	"syscall"
	"time"
)

// process is one training run: a child in its own process group whose stdout and
// stderr are merged into one pipe read by a goroutine. The worker's session loop
// never reads the pipe itself, so a silent or chatty trainer cannot stall
// heartbeats or the stream.
type process struct {
	cmd  *exec.Cmd
	pgid int
	done chan struct{} // closed once the leader is reaped, its group killed and the output drained

	mu       sync.Mutex
	exited   bool
	stopping bool
	killAt   time.Time
	kill     *time.Timer
	state    *os.ProcessState
	waitErr  error
	outDrain time.Duration
}

// outputDrainTimeout bounds how long output is read after the process group died:
// a grandchild that escaped the group (setsid) may hold the pipe open forever.
const outputDrainTimeout = 2 * time.Second

// startProcess runs argv in dir with env, copying its merged output to out.
func startProcess(argv []string, dir string, env []string, out io.Writer) (*process, error) {
	if len(argv) == 0 {
		return nil, errors.New("job command is empty")
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	// With a supervisor, its lifeline's read end becomes its fd 3; workerd keeps
	// the write end open until the supervisor is reaped.
	var lifeline, lifelineRead *os.File
	if len(Supervisor) > 0 {
		lr, lw, err := os.Pipe()
		if err != nil {
			pr.Close()
			pw.Close()
			return nil, err
		}
		defer lr.Close()
		lifeline, lifelineRead = lw, lr
		argv = append(append([]string{}, Supervisor...), argv...)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = dir
	cmd.Env = env
	cmd.Stdin = nil // /dev/null
	cmd.Stdout = pw // the same *os.File for both: exec passes the fd, no copy goroutine
	cmd.Stderr = pw
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Setpgid: true, // own group: stop signals reach every descendant that stays in it
		// If workerd dies (even SIGKILL) the leader goes too, not left training
		// unsupervised on a GPU the orchestrator will hand to someone else.
		Pdeathsig: syscall.SIGKILL,
	}
	if lifeline != nil {
		// The supervisor must outlive workerd long enough to kill the group.
		cmd.SysProcAttr.Pdeathsig = 0
		cmd.ExtraFiles = []*os.File{lifelineRead}
	}
	p := &process{cmd: cmd, done: make(chan struct{}), outDrain: outputDrainTimeout}

	started := make(chan error, 1)
	reaped := make(chan struct{})
	go func() {
		// Pdeathsig fires when the *thread* that forked the child exits, so the
		// thread stays locked to this goroutine until the child has been reaped.
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		err := cmd.Wait()
		p.mu.Lock()
		p.exited = true
		p.state = cmd.ProcessState
		p.waitErr = err
		if p.kill != nil {
			p.kill.Stop()
		}
		p.mu.Unlock()
		close(reaped)
	}()
	if err := <-started; err != nil {
		pr.Close()
		pw.Close()
		if lifeline != nil {
			lifeline.Close()
		}
		return nil, err
	}
	pw.Close() // only the child holds the write end now: EOF comes when the tree is gone
	p.pgid = cmd.Process.Pid

	copied := make(chan struct{})
	go func() {
		defer close(copied)
		_, _ = io.Copy(out, pr)
	}()
	go func() {
		<-reaped
		// The leader is gone; whatever it left behind in its group goes too, so
		// orphaned dataloader workers or a stuck grandchild never linger on the GPU.
		_ = syscall.Kill(-p.pgid, syscall.SIGKILL)
		if lifeline != nil {
			lifeline.Close()
		}
		select {
		case <-copied:
		case <-time.After(p.outDrain):
			_ = pr.SetReadDeadline(time.Now())
			<-copied
		}
		pr.Close()
		close(p.done)
	}()
	return p, nil
}

// Done is closed when the whole run is over.
func (p *process) Done() <-chan struct{} { return p.done }

// Stop sends SIGTERM to the process group and SIGKILL after grace. Calling it again
// can only bring the SIGKILL forward. Grace 0 kills at once.
func (p *process) Stop(grace time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.exited {
		return
	}
	at := time.Now().Add(grace)
	if !p.stopping {
		p.stopping = true
		_ = syscall.Kill(-p.pgid, syscall.SIGTERM)
	} else if !at.Before(p.killAt) {
		return
	}
	p.killAt = at
	if p.kill != nil {
		p.kill.Stop()
	}
	if grace <= 0 {
		_ = syscall.Kill(-p.pgid, syscall.SIGKILL)
		return
	}
	p.kill = time.AfterFunc(grace, func() { _ = syscall.Kill(-p.pgid, syscall.SIGKILL) })
}

// exitDescription says how the leader ended: ok is true for exit status 0.
func (p *process) exitDescription() (ok bool, desc string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	st := p.state
	if st == nil {
		return false, fmt.Sprintf("training ended: %v", p.waitErr)
	}
	if ws, isWS := st.Sys().(syscall.WaitStatus); isWS && ws.Signaled() {
		return false, "killed by signal " + signalName(ws.Signal())
	}
	if st.ExitCode() == 0 {
		return true, ""
	}
	return false, fmt.Sprintf("training exited with code %d", st.ExitCode())
}

func signalName(s syscall.Signal) string {
	switch s {
	case syscall.SIGKILL:
		return "SIGKILL"
	case syscall.SIGTERM:
		return "SIGTERM"
	case syscall.SIGINT:
		return "SIGINT"
	case syscall.SIGSEGV:
		return "SIGSEGV"
	case syscall.SIGABRT:
		return "SIGABRT"
	case syscall.SIGBUS:
		return "SIGBUS"
	case syscall.SIGHUP:
		return "SIGHUP"
	case syscall.SIGPIPE:
		return "SIGPIPE"
	}
	return fmt.Sprintf("%d (%s)", int(s), s.String())
}
