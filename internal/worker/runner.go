package worker

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/checkpoint/keeper"
	"github.com/simpletuner/simpletuner-orchestration/internal/isolation"
	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
)

// A runner runs one attempt of a job, the way Nomad's client runs each
// allocation with an alloc runner of its own: it launches the trainer,
// stops it (SIGTERM, SIGKILL after the grace), keeps its timeout, ships its
// log, reports how it went (spooled, retried), keeps its checkpoints and,
// once it ended, checks that its GPUs are clean. Its reports are in
// report.go, its checkpoints in checkpoints.go, its GPUs in gpunews.go; the
// loop's side of an attempt is in jobs.go.
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
	// flushReports sends the spooled terminal reports (Worker.flushReports):
	// the Worker's, since which of them may go depends on the session (a
	// self-fenced attempt's waits for a registration that left it out).
	flushReports func(ctx context.Context, beforeRegister bool) error
	// reported tells the Worker an attempt's report was acknowledged or
	// given up (Worker.reported): heartbeats stop listing it as finishing.
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
	// use, gpuEvents and fault are what the attempt met on its GPUs: its
	// sampled use, the errors the driver raised that are its own, and the
	// hardware fault it was stopped for.
	use       gpuUse
	gpuEvents []string
	fault     *protocol.GPUFault
	spool     *logSpool // nil when the launch failed before it
	ship      *shipper  // nil without a log endpoint
	ckpt      attemptCheckpoints

	stop       stopReason
	stopDetail string
	// fenced (guarded by the Worker's mu, and the Worker's to set) leaves a
	// self-fenced attempt out of what the worker says it runs while it is
	// being stopped: the orchestrator must take it for lost, not resume it.
	fenced  bool
	timeout *time.Timer

	ended        chan struct{} // closed by the loop when the attempt is over
	acked        bool          // the starting report is on its way (acknowledge)
	progressDone chan struct{} // closed after the starting report was sent
}

func newRunner(env *runnerEnv, ev *protocol.JobSubmitEvent, settings JobSettings) *runner {
	return &runner{
		env: env, jobID: ev.JobID, n: ev.Attempt, ev: ev, settings: settings, grace: settings.grace(ev.CancelGraceSeconds),
		log:          env.log.With("job_id", ev.JobID, "attempt", ev.Attempt),
		ended:        make(chan struct{}),
		progressDone: make(chan struct{}),
	}
}

func (r *runner) key() string { return fmt.Sprintf("%s-%d", r.jobID, r.n) }

func (r *runner) matches(jobID string, n int) bool {
	return r.jobID == jobID && (n == 0 || r.n == n)
}

// begin takes over an attempt the loop has just accepted: a retry gets its
// checkpoint back first. It reports true when the start waits for that
// (checkpointRestored), and the dispatch is acknowledged now; else the loop
// starts it now, and start acknowledges it.
func (r *runner) begin(ctx context.Context) (restoring bool) {
	indices := make([]int, len(r.grant.devices))
	for i, d := range r.grant.devices {
		indices[i] = d.Index
	}
	r.clock = newLaunchClock()
	r.log.Info("job received", "config_name", r.ev.ConfigName, "gpus", indices)
	r.env.crash.fire(r.env.log, "receive", r.ev)
	r.clock.step("receive")
	restoring = r.restoreFirst(ctx)
	r.clock.step("checkpoint_job")
	if restoring {
		r.acknowledge(ctx)
	}
	return restoring
}

// acknowledge sends the dispatch's acknowledgement (starting) off the loop,
// once per attempt. An attempt that starts at once sends it after the
// trainer's exec: on a small machine the request and the orchestrator's
// answer would otherwise take the CPU the launch needs.
func (r *runner) acknowledge(ctx context.Context) {
	if r.acked {
		return
	}
	r.acked = true
	r.env.wg.Add(1)
	go r.sendProgress(ctx)
}

// start launches the trainer and what runs beside it: the checkpoint
// watcher, the log shipper, the timeout, and the waiter that tells the loop
// once the process tree is gone. It reports false when the trainer did not
// start: the loop then ends the attempt.
func (r *runner) start(ctx context.Context) bool {
	r.launch()
	r.acknowledge(ctx)
	if r.startErr != nil {
		r.log.Error("could not start training", "err", r.startErr)
		return false
	}
	ev, env := r.ev, r.env
	env.crash.fire(env.log, "run", ev)
	r.watchCheckpoints(ctx)
	if ev.LogEndpoint != "" {
		r.ship = newShipper(env.c, ev.LogEndpoint, r.n, r.spool, env.opt.Timers.LogPoll,
			env.opt.Timers.ReconnectBase, env.opt.ReconnectMax, r.log)
		env.wg.Add(1)
		go func() { defer env.wg.Done(); r.ship.run(ctx) }()
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

// launch prepares the working directory and starts the process, its log spool and
// shipper. Errors end up in r.startErr and make the attempt fail.
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
	files, err := prepareJobDir(dir, r.resumeEvent())
	if err == nil {
		err = job.Handover(files.paths()...)
	}
	if err != nil {
		job.Finish(nil)
		r.startErr = err
		return
	}
	r.clock.step("files")
	logPath := filepath.Join(env.out.spool.dir, r.key()+".log")
	r.spool = newLogSpool(logPath, r.settings.LogLimitBytes, r.log.With("stream", "output"))
	if r.ev.GPUs != nil && len(*r.ev.GPUs) == 0 && !r.ev.WholeWorker {
		// Said first, where the user reads the job's output: a trainer that
		// finds no GPU otherwise fails with an error that blames the machine.
		_, _ = r.spool.Write([]byte("simpletuner-workerd: this job was given no GPU (gpu_count 0): it runs on the CPU only\n"))
	}
	r.clock.step("spool")
	resume := r.checkpointsAtLaunch(job, files)
	r.clock.step("checkpoints")
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
	vars = append(vars, resume...)
	r.clock.step("env")
	r.proc, err = startProcess(r.settings.Command, files.Dir, vars, r.spool, job, r.clock)
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
// only bring the SIGKILL forward). An attempt still getting its checkpoint
// back never starts.
func (r *runner) halt(grace time.Duration) {
	if r.proc != nil {
		r.proc.Stop(grace)
	} else if r.ckpt.cancel != nil {
		r.ckpt.cancel()
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
// gone (or never started), on the loop: the timeout and the output end, and
// the outcome is spooled to disk and kept from the periodic flusher until
// finish has dealt with the log. The Worker then stops listing the attempt
// as running (closeAttempt).
func (r *runner) close() (rec statusRecord, report, spooled bool) {
	if r.timeout != nil {
		r.timeout.Stop()
	}
	if r.spool != nil {
		_ = r.spool.Close()
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
		rec.Fault = r.fault
	}
	if r.proc != nil {
		u := r.proc.Usage()
		rec.Usage = &protocol.Usage{CPUSeconds: u.CPU.Seconds(), PeakMemoryBytes: u.PeakMemory, GPUEvents: r.gpuEvents}
		r.use.fill(rec.Usage, len(r.grant.devices), time.Since(r.startedAt))
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
