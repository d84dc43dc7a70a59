package worker

import (
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/isolation"
)

// process is one training run: a child started straight from workerd inside
// the job's walls (its own cgroup and uid where the machine allows, its own
// process group always), whose stdout and stderr are merged into one pipe read
// by a goroutine. The worker's session loop never reads the pipe itself, so a
// silent or chatty trainer cannot stall heartbeats or the stream.
type process struct {
	job  *isolation.Job
	pgid int
	done chan struct{} // closed once the leader is reaped, the job ended and the output drained

	mu       sync.Mutex
	exited   bool
	stopping bool
	killAt   time.Time
	kill     *time.Timer
	state    *os.ProcessState
	waitErr  error
	usage    isolation.Usage
	outDrain time.Duration
}

// outputDrainTimeout bounds how long output is read after the job ended: only
// a process that escaped a process-group job (setsid, no cgroup) can hold the
// pipe open that long.
const outputDrainTimeout = 2 * time.Second

// startProcess runs argv in dir with env inside job's walls, copying its
// merged output to out. clock (nil: none) times the start and the walls'
// completion.
func startProcess(argv []string, dir string, env []string, out io.Writer, job *isolation.Job, clock *launchClock) (*process, error) {
	if len(argv) == 0 {
		return nil, errors.New("job command is empty")
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	cmd := job.Command(argv)
	cmd.Dir = dir
	cmd.Env = append(env, job.Env()...)
	cmd.Stdin = nil // /dev/null
	cmd.Stdout = pw // the same *os.File for both: exec passes the fd, no copy goroutine
	cmd.Stderr = pw
	cmd.SysProcAttr = &syscall.SysProcAttr{
		// If workerd dies (even SIGKILL) the leader goes too; the reaper ends
		// the rest of the job.
		Pdeathsig: syscall.SIGKILL,
	}
	job.Apply(cmd.SysProcAttr)
	p := &process{job: job, done: make(chan struct{}), outDrain: outputDrainTimeout}

	started := make(chan error, 1)
	reaped := make(chan struct{})
	// Pdeathsig fires when the *thread* that forked the child exits, so the
	// thread stays locked to this goroutine until the child has been reaped;
	// it is never workerd's main thread (see isolation.GoLocked).
	isolation.GoLocked(func() (threadClean bool) {
		clock.step("prepare")
		threadClean, err := job.StartLeader(cmd.Start)
		if err != nil {
			started <- err
			return threadClean
		}
		clock.step("exec")
		job.Started(cmd.Process.Pid)
		clock.step("started")
		started <- nil
		err = cmd.Wait()
		p.mu.Lock()
		p.exited = true
		p.state = cmd.ProcessState
		p.waitErr = err
		if p.kill != nil {
			p.kill.Stop()
		}
		p.mu.Unlock()
		close(reaped)
		return threadClean
	})
	if err := <-started; err != nil {
		pr.Close()
		pw.Close()
		return nil, err
	}
	pw.Close() // only the job holds the write end now: EOF comes when the job is gone
	p.pgid = cmd.Process.Pid

	copied := make(chan struct{})
	go func() {
		defer close(copied)
		_, _ = io.Copy(out, pr)
	}()
	go func() {
		<-reaped
		// The leader is gone; whatever it left behind goes too, so orphaned
		// dataloader workers or a stuck grandchild never linger on the GPU.
		var ru *syscall.Rusage
		if st := p.state; st != nil {
			ru, _ = st.SysUsage().(*syscall.Rusage)
		}
		usage := job.Finish(ru)
		p.mu.Lock()
		p.usage = usage
		p.mu.Unlock()
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

// Stop sends SIGTERM to every process of the job and SIGKILL to all of them
// after grace. Calling it again can only bring the SIGKILL forward. Grace 0
// kills at once.
func (p *process) Stop(grace time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.exited {
		return
	}
	at := time.Now().Add(grace)
	if !p.stopping {
		p.stopping = true
		p.job.Signal(syscall.SIGTERM)
	} else if !at.Before(p.killAt) {
		return
	}
	p.killAt = at
	if p.kill != nil {
		p.kill.Stop()
	}
	if grace <= 0 {
		p.job.Kill()
		return
	}
	p.kill = time.AfterFunc(grace, p.job.Kill)
}

// Usage is what the job used; valid once Done is closed.
func (p *process) Usage() isolation.Usage {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.usage
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
