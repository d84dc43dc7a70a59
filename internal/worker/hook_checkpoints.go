package worker

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/checkpoint/jobfs"
	"github.com/simpletuner/simpletuner-orchestration/internal/checkpoint/keeper"
	"github.com/simpletuner/simpletuner-orchestration/internal/isolation"
	"github.com/simpletuner/simpletuner-orchestration/internal/jobconfig"
	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
)

// A job's checkpoints are kept in its artifacts (internal/checkpoint/keeper)
// by the attempt's checkpointHook at three moments: before it starts
// (prerun), a retry gets the newest complete checkpoint back (off the loop:
// it may be gigabytes); while it runs (poststart), a watcher uploads each
// finished one; when it ends (postrun), the last one and the outputs are
// uploaded before the end is reported.

// CheckpointSettings are [job]'s checkpoint keys. The zero value keeps none.
type CheckpointSettings struct {
	Enabled        bool
	Keep           int
	Scan           time.Duration
	ScanOnly       bool  // no inotify: the scan alone finds checkpoints
	BytesPerSecond int64 // shared by the worker's uploads; 0 no bound
	// OnShutdown bounds the last checkpoint's upload when the attempt was
	// stopped because workerd is stopping.
	OnShutdown time.Duration
}

// ResumeEnv names, for any trainer, the checkpoint an attempt resumes from.
const ResumeEnv = "SIMPLETUNER_RESUME_FROM"

// checkpointRestored: the restore before an attempt starts is over.
type checkpointRestored struct {
	a   *runner
	r   *keeper.Restored
	err error
}

// checkpointHook keeps an attempt's checkpoints; its state is the loop's
// until the attempt ended, then its postrun's.
type checkpointHook struct {
	a        *runner
	job      keeper.Job // valid with kept
	kept     bool
	note     string           // a line for the job's log at its start
	restored *keeper.Restored // the checkpoint it resumes from; nil: none
	watch    *keeper.Watcher
	cancel   context.CancelFunc // ends the restore in progress
}

// decide decides whether the attempt's checkpoints are kept.
func (h *checkpointHook) decide() {
	r := h.a
	cs := r.settings.Checkpoints
	if !cs.Enabled || r.ev.CheckpointsEndpoint == "" {
		return
	}
	dir, err := jobDir(r.env.opt.WorkDir, r.jobID)
	if err != nil {
		return
	}
	kj, err := keeper.JobFor(r.ev, dir, cs.Keep, cs.Scan)
	if errors.Is(err, keeper.ErrOutsideJob) {
		r.log.Warn("the job's checkpoints are not kept: its output directory is outside the job's directory", "err", err)
		h.note = fmt.Sprintf("simpletuner-workerd: checkpoints are not kept: %v\n", err)
		return
	}
	if err != nil {
		return
	}
	kj.ScanOnly = cs.ScanOnly
	kj.Note = r.logs.note
	h.job, h.kept = kj, true
}

// prerun starts getting a retry's newest checkpoint back and reports true;
// the attempt starts once checkpointRestored arrives. A first attempt, or
// one whose checkpoints are not kept, starts at once (false).
func (h *checkpointHook) prerun(ctx context.Context) (wait bool) {
	r := h.a
	h.decide()
	if !h.kept || r.n < 2 {
		return false
	}
	rctx, cancel := context.WithCancel(ctx)
	h.cancel = cancel
	r.log.Info("getting the job's newest checkpoint back before training starts")
	env := r.env
	env.wg.Add(1)
	go func() {
		defer env.wg.Done()
		kr, err := env.keeper.Restore(rctx, h.job)
		env.post(checkpointRestored{a: r, r: kr, err: err})
	}()
	return true
}

// restoreOver takes the restore's result; it reports whether the attempt
// starts now. One the loop no longer runs (current is false), or stopped
// meanwhile, does not: its checkpoint is discarded.
func (h *checkpointHook) restoreOver(m checkpointRestored, current bool) (start bool) {
	r := h.a
	h.cancel()
	switch {
	case !current, r.stop != notStopped:
		m.r.Discard()
		return false
	case m.err != nil:
		r.log.Warn("the job's checkpoints could not be listed; training starts afresh", "err", m.err)
		h.note = fmt.Sprintf("simpletuner-workerd: the job's checkpoints could not be listed (%v); training starts afresh\n", m.err)
	case m.r.Found():
		h.restored = m.r
		r.log.Info("checkpoint restored", "checkpoint", m.r.Checkpoint.Name, "step", m.r.Checkpoint.Step,
			"of_attempt", m.r.Checkpoint.Attempt, "bytes", m.r.Checkpoint.Bytes, "seconds", m.r.Took.Seconds())
	case m.r != nil && len(m.r.Skipped) > 0:
		h.note = fmt.Sprintf("simpletuner-workerd: no checkpoint of the job could be restored (%d tried); training starts afresh\n", len(m.r.Skipped))
	}
	return true
}

// resumeEvent is the attempt's job_submit with the training config pointed
// at the restored checkpoint.
func (h *checkpointHook) resumeEvent() *protocol.JobSubmitEvent {
	if !h.restored.Found() {
		return h.a.ev
	}
	ev := *h.a.ev
	ev.Config = jobconfig.Set(ev.Config, "resume_from_checkpoint", h.restored.Path)
	return &ev
}

func (h *checkpointHook) launchStep() string { return "checkpoints" }

// prestart runs once the job's directory is the job's and its log is open,
// before the trainer starts: it puts the restored checkpoint in place and
// takes the watcher's first look. It returns what the trainer's environment
// adds.
func (h *checkpointHook) prestart(job *isolation.Job, files jobFiles) []string {
	r := h.a
	if h.note != "" {
		r.logs.note(h.note)
	}
	if !h.kept {
		return nil
	}
	uid, gid, other := job.Owner()
	id := jobfs.Ident{UID: int(uid), GID: int(gid), Switch: other}
	var env []string
	step := int64(-1)
	if kr := h.restored; kr.Found() {
		cp := kr.Checkpoint
		if err := kr.Place(id); err != nil {
			r.log.Error("the restored checkpoint could not be put in place; training starts afresh", "checkpoint", cp.Name, "err", err)
			r.logs.note(fmt.Sprintf("simpletuner-workerd: %s could not be put back (%v); training starts afresh\n", cp.Name, err))
			// The config names it: written again, as the job, without.
			if err := id.Do(func() error { _, err := prepareJobDir(files.Dir, r.ev); return err }); err != nil {
				r.log.Error("the job's config could not be written again", "err", err)
			}
			h.restored = nil
		} else {
			r.logs.note(fmt.Sprintf("simpletuner-workerd: resuming from %s (step %d, kept by attempt %d), restored in %.1f s\n",
				cp.Name, cp.Step, cp.Attempt, kr.Took.Seconds()))
			env = append(env, ResumeEnv+"="+kr.Path)
			step = cp.Step
		}
	}
	h.watch = r.env.keeper.Watch(h.job, id, step)
	return env
}

// poststart runs the attempt's watcher beside its training.
func (h *checkpointHook) poststart(ctx context.Context) {
	if h.watch != nil {
		h.watch.Start(ctx, h.a.env.wg)
	}
}

// stop ends the restore of an attempt stopped before its start.
func (h *checkpointHook) stop() {
	if h.cancel != nil {
		h.cancel()
	}
}

// postrun ends the attempt's watcher once its trainer is gone. An
// attempt whose trainer ran and ended by itself, or was stopped for its
// timeout or its GPU (a retry may follow), uploads its last checkpoint (and,
// after a clean exit, its outputs) first: its report waits for them. One that
// was cancelled, that the orchestrator moved on from, or that fenced itself
// uploads nothing more.
func (h *checkpointHook) postrun(ctx context.Context, end *attemptEnd) {
	r := h.a
	if h.watch == nil {
		return
	}
	final := end.report && r.proc != nil && r.stop != stopFence && r.stop != stopCancel
	h.watch.Finish(ctx, final, end.rec.Status == protocol.ReportCompleted)
}

// shutdown is postrun for an attempt stopped
// because workerd is stopping: the checkpoint its trainer finished last
// (one saved on SIGTERM, or since the watcher last looked) is uploaded
// within the job's shutdown_checkpoint_timeout, before the report that lets
// the orchestrator requeue the job, so the retry resumes from it.
func (h *checkpointHook) shutdown(end *attemptEnd) {
	if h.watch == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), h.a.settings.Checkpoints.OnShutdown)
	defer cancel()
	h.postrun(ctx, end)
}
