package worker

import (
	"fmt"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/gpu"
	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
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

// attempt is one dispatch of a job running on this worker. Its fields are owned
// by the session loop except where noted.
type attempt struct {
	jobID string
	n     int
	ev    *protocol.JobSubmitEvent
	// settings are the job settings in force when the attempt arrived.
	settings JobSettings
	grace    time.Duration
	log      *slog.Logger
	// gpus are the GPUs the attempt may use; whole is set for a dispatch
	// that gave it the whole worker (then gpus is every GPU).
	gpus  []gpu.Device
	whole bool

	proc      *process // nil when the start failed
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

	stop       stopReason
	stopDetail string
	// fenced (guarded by w.mu) leaves a self-fenced attempt out of what the
	// worker says it runs while it is being stopped: the orchestrator must
	// take it for lost, not resume it.
	fenced  bool
	timeout *time.Timer

	launched     chan struct{} // closed once the start was tried (success or not)
	ended        chan struct{} // closed by the loop when the attempt is over
	progressDone chan struct{} // closed after the starting report was sent
}

func (a *attempt) key() string { return fmt.Sprintf("%s-%d", a.jobID, a.n) }

func (a *attempt) matches(jobID string, n int) bool {
	return a.jobID == jobID && (n == 0 || a.n == n)
}

// record is the terminal report of an ended attempt; ok is false when nothing
// is reported (the orchestrator already moved on).
func (a *attempt) record() (rec statusRecord, ok bool) {
	rec = statusRecord{JobID: a.jobID, Attempt: a.n, Created: time.Now().UTC()}
	switch a.stop {
	case stopAbandon:
		return rec, false
	case stopCancel:
		rec.Status = protocol.ReportCancelled
	case stopShutdown, stopFence:
		rec.Status = protocol.ReportCancelled
		rec.Error = a.stopDetail
		rec.AfterRegister = a.stop == stopFence
	case stopTimeout:
		rec.Status = protocol.ReportFailed
		rec.Error = a.stopDetail
	case stopGPUFault:
		rec.Status = protocol.ReportFailed
		rec.Error = a.stopDetail
		rec.Fault = a.fault
	}
	if a.proc != nil {
		u := a.proc.Usage()
		rec.Usage = &protocol.Usage{CPUSeconds: u.CPU.Seconds(), PeakMemoryBytes: u.PeakMemory, GPUEvents: a.gpuEvents}
		a.use.fill(rec.Usage, len(a.gpus), time.Since(a.startedAt))
	}
	if rec.Status == "" {
		switch {
		case a.startErr != nil:
			rec.Status = protocol.ReportFailed
			rec.Error = "could not start training: " + a.startErr.Error()
		case a.proc == nil:
			rec.Status = protocol.ReportFailed
			rec.Error = "training did not start"
		default:
			if ok, desc := a.proc.exitDescription(); ok {
				rec.Status = protocol.ReportCompleted
			} else {
				rec.Status = protocol.ReportFailed
				rec.Error = desc
			}
		}
	}
	return rec, true
}

// launch prepares the working directory and starts the process, its log spool and
// shipper. Errors end up in a.startErr and make the attempt fail.
func (w *Worker) launch(a *attempt) {
	defer close(a.launched)
	dir, err := jobDir(w.opt.WorkDir, a.ev.JobID)
	if err != nil {
		a.startErr = err
		return
	}
	job, err := w.iso.Start(a.ev.JobID, a.n, dir, w.otherGPUNodes(a))
	if err != nil {
		a.startErr = fmt.Errorf("job isolation: %w", err)
		return
	}
	files, err := prepareJobDir(dir, a.ev)
	if err == nil {
		err = job.Handover(files.paths()...)
	}
	if err != nil {
		job.Finish(nil)
		a.startErr = err
		return
	}
	logPath := filepath.Join(w.spool.dir, a.key()+".log")
	a.spool = newLogSpool(logPath, a.settings.LogLimitBytes, a.log.With("stream", "output"))
	if a.ev.GPUs != nil && len(*a.ev.GPUs) == 0 && !a.ev.WholeWorker {
		// Said first, where the user reads the job's output: a trainer that
		// finds no GPU otherwise fails with an error that blames the machine.
		_, _ = a.spool.Write([]byte("simpletuner-workerd: this job was given no GPU (gpu_count 0): it runs on the CPU only\n"))
	}
	env := jobEnv(jobEnvInput{
		Base:            w.opt.Environ(),
		Pass:            a.settings.PassEnv,
		Extra:           a.settings.Env,
		Token:           w.c.tok.get(),
		Files:           files,
		Event:           a.ev,
		OrchestratorURL: w.c.currentURL(),
		GPUs:            w.gpuEnv(a),
	})
	a.proc, err = startProcess(a.settings.Command, files.Dir, env, a.spool, job)
	if err != nil {
		job.Finish(nil)
		a.startErr = err
		return
	}
	a.startedAt = time.Now()
	a.log.Info("training started", "pid", a.proc.pgid, "dir", files.Dir, "uid", job.Uid(), "cgroup", job.CgroupDir(), "command", a.settings.Command)
}
