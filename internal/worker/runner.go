package worker

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/checkpoint/keeper"
	"github.com/simpletuner/simpletuner-orchestration/internal/isolation"
	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
)

// A runner runs one attempt of a job, the way Nomad's client runs each
// allocation with an alloc runner of its own: it launches the trainer,
// stops it (SIGTERM, SIGKILL after the grace), keeps its timeout and
// writes down how it ended. The steps beside the trainer are its hooks
// (hooks.go): the log (hook_log.go), the checkpoints (hook_checkpoints.go),
// the GPUs (hook_gpus.go) and the reports (hook_report.go). The loop's side
// of an attempt is in jobs.go.
//
// The session loop creates, drives and tears down every runner and stays
// the one place that decides: whether to take a dispatch, when to stop an
// attempt and why, what the heartbeats list. A runner decides nothing that
// needs the other attempts' state; what it learns that calls for a decision
// (its process ended, its timeout passed, the orchestrator called it stale,
// its checkpoint is back, its report is done) it posts to the loop. Its
// fields are the loop's except where noted; the goroutines it starts read
// only what the loop set before starting them.

// Messages from runners to the loop.
type (
	jobEnded    struct{ a *runner }
	jobTimedOut struct{ a *runner }
)

// stopReason records why the worker stopped an attempt; it decides the report.
type stopReason int

const (
	notStopped   stopReason = iota
	stopCancel              // job_cancel: report cancelled
	stopShutdown            // the worker is exiting: report cancelled
	stopFence               // self-fenced: report cancelled, but only after re-registering
	stopTimeout             // timeout_seconds passed: report failed
	stopAbandon             // the orchestrator moved on (abandon, 409): report nothing
	stopGPUFault            // one of its GPUs failed: report failed with the fault
)

// runnerEnv is what the Worker lends each of its runners, set once by New:
// the services the attempts share, and the only ways back to the Worker.
// Nothing here tells a runner about the other attempts.
type runnerEnv struct {
	opt    *Options     // read only
	log    *slog.Logger // the Worker's; each runner logs with its job and attempt
	c      *client
	iso    *isolation.Isolator
	keeper *keeper.Keeper // keeps the jobs' checkpoints in their artifacts
	gpus   *gpuWatch
	out    *outbox
	crash  *crashHook      // the fault suite's crash hook; nil in production
	wg     *sync.WaitGroup // Serve waits for the runners' goroutines too

	// post hands a message to the session loop (Worker.post).
	post func(any)
	// reported tells the ledger an attempt's report was acknowledged or
	// given up (ledger.reported): heartbeats stop listing it as finishing.
	reported func(key string)
}

// runner is one dispatch of a job running on this worker, and what runs it.
type runner struct {
	env   *runnerEnv
	jobID string
	n     int
	ev    *protocol.JobSubmitEvent
	// settings are the job settings in force when the attempt arrived.
	settings JobSettings
	grace    time.Duration
	log      *slog.Logger
	// grant is its share of the worker, given by the allotment (reserve)
	// against the other attempts'.
	grant grant

	proc      *process // nil when the start failed
	clock     *launchClock
	startedAt time.Time
	startErr  error

	// The attempt's steps (hooks.go), by phase and by name.
	hooks  hooks
	logs   *logHook
	ckpt   *checkpointHook
	gpus   *gpuHook
	report *reportHook

	stop       stopReason
	stopDetail string
	// fenced (guarded by the Worker's mu, and the Worker's to set) leaves a
	// self-fenced attempt out of what the worker says it runs while it is
	// being stopped: the orchestrator must take it for lost, not resume it.
	fenced  bool
	timeout *time.Timer

	ended chan struct{} // closed by the loop when the attempt is over
}

func newRunner(env *runnerEnv, ev *protocol.JobSubmitEvent, settings JobSettings) *runner {
	r := &runner{
		env: env, jobID: ev.JobID, n: ev.Attempt, ev: ev, settings: settings, grace: settings.grace(ev.CancelGraceSeconds),
		log:   env.log.With("job_id", ev.JobID, "attempt", ev.Attempt),
		ended: make(chan struct{}),
	}
	newHooks(r)
	return r
}

func (r *runner) key() string { return fmt.Sprintf("%s-%d", r.jobID, r.n) }

func (r *runner) matches(jobID string, n int) bool {
	return r.jobID == jobID && (n == 0 || r.n == n)
}

// begin takes over an attempt the loop has just accepted and runs its
// prerun hooks: a retry gets its checkpoint back first. It reports true when
// the start waits for one of them (checkpointRestored), and the dispatch is
// acknowledged now; else the loop starts it now, and start acknowledges it.
func (r *runner) begin(ctx context.Context) (restoring bool) {
	indices := make([]int, len(r.grant.devices))
	for i, d := range r.grant.devices {
		indices[i] = d.Index
	}
	r.clock = newLaunchClock()
	r.log.Info("job received", "config_name", r.ev.ConfigName, "gpus", indices)
	r.env.crash.fire(r.env.log, "receive", r.ev)
	r.clock.step("receive")
	for _, h := range r.hooks.prerun {
		restoring = h.prerun(ctx) || restoring
	}
	r.clock.step("checkpoint_job")
	if restoring {
		r.report.acknowledge(ctx)
	}
	return restoring
}

// start launches the trainer, acknowledges the dispatch right after its
// exec, and starts what runs beside it: the poststart hooks (the checkpoint
// watcher, the log shipper), the timeout, and the waiter that tells the
// loop once the process tree is gone. It reports false when the trainer did
// not start: the loop then ends the attempt.
func (r *runner) start(ctx context.Context) bool {
	r.launch()
	r.report.acknowledge(ctx)
	if r.startErr != nil {
		r.log.Error("could not start training", "err", r.startErr)
		return false
	}
	ev, env := r.ev, r.env
	env.crash.fire(env.log, "run", ev)
	for _, h := range r.hooks.poststart {
		h.poststart(ctx)
	}
	if ev.TimeoutSeconds > 0 {
		r.timeout = time.AfterFunc(time.Duration(ev.TimeoutSeconds*float64(time.Second)), func() { env.post(jobTimedOut{a: r}) })
	}
	env.wg.Add(1)
	go func() {
		defer env.wg.Done()
		select {
		case <-r.proc.Done():
			env.post(jobEnded{a: r})
		case <-ctx.Done():
		}
	}()
	return true
}

// launch prepares the working directory, runs the prestart hooks (the log
// spool, the restored checkpoint) and starts the process. Errors end up in
// r.startErr and make the attempt fail.
func (r *runner) launch() {
	env := r.env
	dir, err := jobDir(env.opt.WorkDir, r.ev.JobID)
	if err != nil {
		r.startErr = err
		return
	}
	r.clock.step("wait")
	job, err := env.iso.Start(r.ev.JobID, r.n, dir, r.grant.otherNodes)
	if err != nil {
		r.startErr = fmt.Errorf("job isolation: %w", err)
		return
	}
	r.clock.step("walls")
	files, err := prepareJobDir(dir, r.ckpt.resumeEvent())
	if err == nil {
		err = job.Handover(files.paths()...)
	}
	if err != nil {
		job.Finish(nil)
		r.startErr = err
		return
	}
	r.clock.step("files")
	var extra []string
	for _, h := range r.hooks.prestart {
		extra = append(extra, h.prestart(job, files)...)
		r.clock.step(h.launchStep())
	}
	vars := jobEnv(jobEnvInput{
		Base:            env.opt.Environ(),
		Pass:            r.settings.PassEnv,
		Extra:           r.settings.Env,
		Token:           env.c.Token().Get(),
		Files:           files,
		Event:           r.ev,
		OrchestratorURL: env.c.CurrentURL(),
		GPUs:            r.grant.env,
	})
	vars = append(vars, extra...)
	r.clock.step("env")
	r.proc, err = startProcess(r.settings.Command, files.Dir, vars, r.logs.spool, job, r.clock)
	if err != nil {
		job.Finish(nil)
		r.startErr = err
		return
	}
	r.startedAt = time.Now()
	r.log.Info("training started", "pid", r.proc.pgid, "dir", files.Dir, "uid", job.Uid(), "cgroup", job.CgroupDir(), "launch", job.LaunchPath(), "command", r.settings.Command)
	r.clock.step("log")
	r.clock.log(r.log)
}

// setStop records why the loop stops the attempt and returns the reason in
// force. The first reason is kept, except that "abandoned" overrides (it
// suppresses the report).
func (r *runner) setStop(why stopReason, detail string, grace time.Duration) stopReason {
	switch {
	case r.stop == why:
		// Repeated (a heartbeat reply repeats a cancel): only the SIGKILL may come sooner.
	case r.stop == notStopped || why == stopAbandon:
		r.stop, r.stopDetail = why, detail
		r.log.Info("stopping training", "reason", detail, "grace", grace.String())
	}
	return r.stop
}

// halt stops the process tree: SIGTERM now, SIGKILL after grace (a repeat can
// only bring the SIGKILL forward). One not started yet has its stop hooks
// run: an attempt still getting its checkpoint back never starts.
func (r *runner) halt(grace time.Duration) {
	if r.proc != nil {
		r.proc.Stop(grace)
		return
	}
	for _, h := range r.hooks.stop {
		h.stop()
	}
}

// cancelGrace is the grace of a job_cancel that asked for seconds (0: it did
// not say).
func (r *runner) cancelGrace(seconds float64) time.Duration { return r.settings.grace(seconds) }

// timedOut is the stop detail of an attempt whose timeout passed.
func (r *runner) timedOut() string {
	return fmt.Sprintf("timed out after %s", time.Duration(r.ev.TimeoutSeconds*float64(time.Second)))
}

// close is the runner's part of ending the attempt once its process tree is
// gone (or never started), on the loop: the timeout and the close hooks
// (the output) end, and the outcome is spooled to disk and kept from the
// periodic flusher until finish has dealt with the log. The Worker then
// stops listing the attempt as running (closeAttempt).
func (r *runner) close() (rec statusRecord, report, spooled bool) {
	if r.timeout != nil {
		r.timeout.Stop()
	}
	for _, h := range r.hooks.close {
		h.close()
	}
	select {
	case <-r.ended:
	default:
		close(r.ended)
	}
	rec, report = r.record()
	if report {
		r.log.Info("training ended", "status", rec.Status, "error", rec.Error)
		out := r.env.out
		out.hold(rec.key())
		if err := out.spool.put(rec); err != nil {
			out.release(rec.key())
			r.log.Error("cannot spool the job's outcome", "err", err)
		} else {
			spooled = true
		}
	} else {
		r.log.Info("training stopped; not reported, the orchestrator moved on", "reason", r.stopDetail)
	}
	return rec, report, spooled
}

// record is the terminal report of an ended attempt; ok is false when nothing
// is reported (the orchestrator already moved on).
func (r *runner) record() (rec statusRecord, ok bool) {
	rec = statusRecord{JobID: r.jobID, Attempt: r.n, Created: time.Now().UTC()}
	switch r.stop {
	case stopAbandon:
		return rec, false
	case stopCancel:
		rec.Status = protocol.ReportCancelled
	case stopShutdown, stopFence:
		rec.Status = protocol.ReportCancelled
		rec.Error = r.stopDetail
		rec.AfterRegister = r.stop == stopFence
		rec.Shutdown = r.stop == stopShutdown
	case stopTimeout:
		rec.Status = protocol.ReportFailed
		rec.Error = r.stopDetail
	case stopGPUFault:
		rec.Status = protocol.ReportFailed
		rec.Error = r.stopDetail
		rec.Fault = r.gpus.fault
	}
	if r.proc != nil {
		u := r.proc.Usage()
		rec.Usage = &protocol.Usage{CPUSeconds: u.CPU.Seconds(), PeakMemoryBytes: u.PeakMemory}
		r.gpus.fill(rec.Usage, time.Since(r.startedAt))
	}
	if rec.Status == "" {
		switch {
		case r.startErr != nil:
			rec.Status = protocol.ReportFailed
			rec.Error = "could not start training: " + r.startErr.Error()
		case r.proc == nil:
			rec.Status = protocol.ReportFailed
			rec.Error = "training did not start"
		default:
			if ok, desc := r.proc.exitDescription(); ok {
				rec.Status = protocol.ReportCompleted
			} else {
				rec.Status = protocol.ReportFailed
				rec.Error = desc
			}
		}
	}
	return rec, true
}

// waitGone waits for a stopped attempt's processes to be gone: SIGKILL comes
// after the grace, so this is bounded.
func (r *runner) waitGone() {
	if r.proc != nil {
		select {
		case <-r.proc.Done():
		case <-time.After(r.grace + 10*time.Second):
			r.log.Error("the job's process tree did not end after SIGKILL")
		}
	}
}

// finish deals with an ended attempt off the loop: its postrun hooks in
// order (the starting report and the log, within one drain budget; the
// GPUs' hygiene; the last checkpoint), then its terminal report, last.
func (r *runner) finish(ctx context.Context, rec statusRecord, report, spooled bool) {
	env := r.env
	defer env.wg.Done()
	defer env.post(reportDone{a: r})
	drain := time.NewTimer(env.opt.Timers.LogDrain)
	defer drain.Stop()
	end := &attemptEnd{rec: rec, report: report, spooled: spooled, drain: drain.C}
	for _, h := range r.hooks.postrun {
		h.postrun(ctx, end)
	}
	r.report.deliver(ctx, end)
}

// finishOnShutdown is finish for an attempt stopped because the worker
// exits: the shutdown hooks, each bounded (the last checkpoint within the
// job's shutdown_checkpoint_timeout, a moment for the log's tail); the
// spooled report goes with the worker's final flush, and one the spool
// could not take gets one direct try.
func (r *runner) finishOnShutdown(rec statusRecord, report, spooled bool) {
	end := &attemptEnd{rec: rec, report: report, spooled: spooled}
	for _, h := range r.hooks.shutdown {
		h.shutdown(end)
	}
	r.report.lastTry(end)
}
