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
// at three moments of an attempt: before it starts, a retry gets the newest
// complete checkpoint back (off the loop: it may be gigabytes); while it
// runs, a watcher uploads each finished one; when it ends, the last one and
// the outputs are uploaded before the end is reported.

// CheckpointSettings are [job]'s checkpoint keys. The zero value keeps none.
type CheckpointSettings struct {
	Enabled        bool
	Keep           int
	Scan           time.Duration
	BytesPerSecond int64 // shared by the worker's uploads; 0 no bound
}

// ResumeEnv names, for any trainer, the checkpoint an attempt resumes from.
const ResumeEnv = "SIMPLETUNER_RESUME_FROM"

// checkpointRestored: the restore before an attempt starts is over.
type checkpointRestored struct {
	a   *attempt
	r   *keeper.Restored
	err error
}

// attemptCheckpoints is what an attempt holds of its checkpoints; the loop
// owns it.
type attemptCheckpoints struct {
	job      keeper.Job // valid with kept
	kept     bool
	note     string           // a line for the job's log at its start
	restored *keeper.Restored // the checkpoint it resumes from; nil: none
	watch    *keeper.Watcher
	cancel   context.CancelFunc // ends the restore in progress
}

// checkpointJob decides whether a's checkpoints are kept.
func (w *Worker) checkpointJob(a *attempt) {
	cs := a.settings.Checkpoints
	if !cs.Enabled || a.ev.CheckpointsEndpoint == "" {
		return
	}
	dir, err := jobDir(w.opt.WorkDir, a.jobID)
	if err != nil {
		return
	}
	kj, err := keeper.JobFor(a.ev, dir, cs.Keep, cs.Scan)
	if errors.Is(err, keeper.ErrOutsideJob) {
		a.log.Warn("the job's checkpoints are not kept: its output directory is outside the job's directory", "err", err)
		a.ckpt.note = fmt.Sprintf("simpletuner-workerd: checkpoints are not kept: %v\n", err)
		return
	}
	if err != nil {
		return
	}
	kj.Note = func(line string) {
		if a.spool != nil {
			_, _ = a.spool.Write([]byte(line))
		}
	}
	a.ckpt.job, a.ckpt.kept = kj, true
}

// restoreFirst starts getting a retry's newest checkpoint back and reports
// true; the attempt starts once checkpointRestored arrives. A first attempt,
// or one whose checkpoints are not kept, starts at once (false).
func (w *Worker) restoreFirst(ctx context.Context, a *attempt) bool {
	w.checkpointJob(a)
	if !a.ckpt.kept || a.n < 2 {
		return false
	}
	rctx, cancel := context.WithCancel(ctx)
	a.ckpt.cancel = cancel
	a.log.Info("getting the job's newest checkpoint back before training starts")
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		r, err := w.keeper.Restore(rctx, a.ckpt.job)
		w.post(checkpointRestored{a: a, r: r, err: err})
	}()
	return true
}

// onRestored starts the attempt whose restore is over, unless it was
// stopped meanwhile.
func (w *Worker) onRestored(ctx context.Context, m checkpointRestored) {
	a := m.a
	a.ckpt.cancel()
	switch {
	case !w.isCurrent(a):
		m.r.Discard()
		return
	case a.stop != notStopped:
		m.r.Discard()
		w.endAttempt(ctx, a)
		return
	case m.err != nil:
		a.log.Warn("the job's checkpoints could not be listed; training starts afresh", "err", m.err)
		a.ckpt.note = fmt.Sprintf("simpletuner-workerd: the job's checkpoints could not be listed (%v); training starts afresh\n", m.err)
	case m.r.Found():
		a.ckpt.restored = m.r
		a.log.Info("checkpoint restored", "checkpoint", m.r.Checkpoint.Name, "step", m.r.Checkpoint.Step,
			"of_attempt", m.r.Checkpoint.Attempt, "bytes", m.r.Checkpoint.Bytes, "seconds", m.r.Took.Seconds())
	case m.r != nil && len(m.r.Skipped) > 0:
		a.ckpt.note = fmt.Sprintf("simpletuner-workerd: no checkpoint of the job could be restored (%d tried); training starts afresh\n", len(m.r.Skipped))
	}
	w.startAttempt(ctx, a)
}

// resumeEvent is a's job_submit with the training config pointed at the
// restored checkpoint.
func resumeEvent(a *attempt) *protocol.JobSubmitEvent {
	if !a.ckpt.restored.Found() {
		return a.ev
	}
	ev := *a.ev
	ev.Config = jobconfig.Set(ev.Config, "resume_from_checkpoint", a.ckpt.restored.Path)
	return &ev
}

// checkpointsAtLaunch runs once the job's directory is the job's and its log
// is open, before the trainer starts: it puts the restored checkpoint in
// place and takes the watcher's first look. It returns what the trainer's
// environment adds.
func (w *Worker) checkpointsAtLaunch(a *attempt, job *isolation.Job, files jobFiles) []string {
	if a.ckpt.note != "" {
		_, _ = a.spool.Write([]byte(a.ckpt.note))
	}
	if !a.ckpt.kept {
		return nil
	}
	uid, gid, other := job.Owner()
	id := jobfs.Ident{UID: int(uid), GID: int(gid), Switch: other}
	var env []string
	step := int64(-1)
	if r := a.ckpt.restored; r.Found() {
		cp := r.Checkpoint
		if err := r.Place(id); err != nil {
			a.log.Error("the restored checkpoint could not be put in place; training starts afresh", "checkpoint", cp.Name, "err", err)
			_, _ = a.spool.Write([]byte(fmt.Sprintf("simpletuner-workerd: %s could not be put back (%v); training starts afresh\n", cp.Name, err)))
			// The config names it: written again, as the job, without.
			if err := id.Do(func() error { _, err := prepareJobDir(files.Dir, a.ev); return err }); err != nil {
				a.log.Error("the job's config could not be written again", "err", err)
			}
			a.ckpt.restored = nil
		} else {
			_, _ = a.spool.Write([]byte(fmt.Sprintf("simpletuner-workerd: resuming from %s (step %d, kept by attempt %d), restored in %.1f s\n",
				cp.Name, cp.Step, cp.Attempt, r.Took.Seconds())))
			env = append(env, ResumeEnv+"="+r.Path)
			step = cp.Step
		}
	}
	a.ckpt.watch = w.keeper.Watch(a.ckpt.job, id, step)
	return env
}

// watchCheckpoints runs a's watcher beside its training.
func (w *Worker) watchCheckpoints(ctx context.Context, a *attempt) {
	if a.ckpt.watch != nil {
		a.ckpt.watch.Start(ctx, &w.wg)
	}
}

// finishCheckpoints ends a's watcher once its trainer is gone. An attempt
// whose trainer ran and ended by itself, or was stopped for its timeout or
// its GPU (a retry may follow), uploads its last checkpoint (and, after a
// clean exit, its outputs) first: its report waits for them. One that was
// cancelled, that the orchestrator moved on from, or that fenced itself
// uploads nothing more.
func (w *Worker) finishCheckpoints(ctx context.Context, a *attempt, rec statusRecord, report bool) {
	if a.ckpt.watch == nil {
		return
	}
	final := report && a.proc != nil && a.stop != stopFence && a.stop != stopCancel
	a.ckpt.watch.Finish(ctx, final, rec.Status == protocol.ReportCompleted)
}
