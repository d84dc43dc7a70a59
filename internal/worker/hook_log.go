package worker

import (
	"context"
	"path/filepath"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/isolation"
)

// logHook keeps the attempt's output: the spool on disk the trainer writes
// into (logship.go), the lines workerd adds to it, and the shipper that
// sends it to the orchestrator.
type logHook struct {
	a     *runner
	spool *logSpool // nil until the launch opened it
	ship  *shipper  // nil without a log endpoint
}

func (h *logHook) launchStep() string { return "spool" }

// prestart opens the spool the trainer's output goes to.
func (h *logHook) prestart(*isolation.Job, jobFiles) []string {
	a := h.a
	logPath := filepath.Join(a.env.out.spool.dir, a.key()+".log")
	h.spool = newLogSpool(logPath, a.settings.LogLimitBytes, a.log.With("stream", "output"))
	if a.ev.GPUs != nil && len(*a.ev.GPUs) == 0 && !a.ev.WholeWorker {
		// Said first, where the user reads the job's output: a trainer that
		// finds no GPU otherwise fails with an error that blames the machine.
		h.note("simpletuner-workerd: this job was given no GPU (gpu_count 0): it runs on the CPU only\n")
	}
	return nil
}

// note writes a line of workerd's into the job's log, once it is open.
func (h *logHook) note(line string) {
	if h != nil && h.spool != nil {
		_, _ = h.spool.Write([]byte(line))
	}
}

// poststart ships the log beside the training.
func (h *logHook) poststart(ctx context.Context) {
	a, env := h.a, h.a.env
	if a.ev.LogEndpoint == "" {
		return
	}
	h.ship = newShipper(env.c, a.ev.LogEndpoint, a.n, h.spool, env.opt.Timers.LogPoll,
		env.opt.Timers.ReconnectBase, env.opt.ReconnectMax, a.log)
	env.wg.Add(1)
	go func() { defer env.wg.Done(); h.ship.run(ctx) }()
}

// close ends the output: the shipper sends what is left and stops.
func (h *logHook) close() {
	if h.spool != nil {
		_ = h.spool.Close()
	}
}

// postrun waits, within the drain budget, for the log to ship.
func (h *logHook) postrun(ctx context.Context, end *attemptEnd) {
	if h.ship == nil {
		return
	}
	select {
	case <-h.ship.done:
	case <-end.drain:
		h.a.log.Warn("the job's log is still shipping; reporting the outcome first")
	case <-ctx.Done():
	}
}

// shutdown gives the log's tail a moment; it is in the journal in any case.
func (h *logHook) shutdown(*attemptEnd) {
	if h.ship == nil {
		return
	}
	select {
	case <-h.ship.done:
	case <-time.After(min(h.a.env.opt.Timers.ShutdownTimeout, 2*time.Second)):
	}
}
