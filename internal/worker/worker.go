// Package worker is simpletuner-workerd's engine: it registers with the
// orchestrator, holds the SSE stream, heartbeats, runs training jobs (one per GPU
// slot) each as a process tree, ships the job's log and reports how it ended (protocol 2
// of docs/protocol.md).
//
// Shape: one session loop (Serve) owns all decisions; everything that waits on
// the network or on a process (the stream reader, the heartbeats, the log shipper,
// report senders, the process waiter, the GPU watcher) runs on its own goroutine and posts a message
// to the loop. Nothing the trainer does can stall heartbeats or the stream.
// The Worker holds the parts the loop decides with, each a type of its own:
// the allotment (allotment.go: which attempt holds which slots and GPUs),
// the ledger (ledger.go: what the worker answers for), the link (link.go:
// the session's state), the heartbeater, the outbox of terminal reports and
// the GPU watcher. It talks to the orchestrator through one client
// (orchclient). Each attempt has a runner (runner.go) that the loop
// creates, drives and tears down: it launches and stops the trainer and
// keeps its timeout, and its hooks (hooks.go) keep its log, checkpoints,
// GPU hygiene and reports; it decides nothing that needs the other
// attempts.
//
// Files on disk, under Options.StateDir/spool: <job>-<attempt>.log (the job's
// output, shipped from there) and reports.jsonl (the terminal reports not yet
// acknowledged; re-sent until the orchestrator answers 2xx or 409).
package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/checkpoint/keeper"
	"github.com/simpletuner/simpletuner-orchestration/internal/config"
	"github.com/simpletuner/simpletuner-orchestration/internal/gpu"
	"github.com/simpletuner/simpletuner-orchestration/internal/isolation"
	"github.com/simpletuner/simpletuner-orchestration/internal/worker/orchclient"
)

// Worker implements daemon.App (Start, Serve, Healthy, Status, Reload, Drain).
type Worker struct {
	opt  Options
	log  *slog.Logger
	c    *client
	iso  *isolation.Isolator
	out  *outbox // the terminal reports on their way
	gpus *gpuWatch
	// runnerEnv is what the attempts' runners share (see runner.go).
	runnerEnv runnerEnv

	msgs     chan any      // to the session loop
	loopDone chan struct{} // closed when the loop stops reading msgs
	wg       sync.WaitGroup

	stopHeartbeats func(context.Context) // set by Serve: stops the heartbeat goroutine and waits

	// slots is which attempts hold which slots and GPUs; books what the
	// worker answers for (running and finishing attempts); link the
	// session's state.
	slots *allotment
	books *ledger
	link  *link

	localDrain atomic.Bool // Drain(): finish the job, then exit

	mu          sync.Mutex // guards the fields below
	orchDrain   bool       // the orchestrator said drain
	jobSettings JobSettings
	// deferred are dispatches that wait for an attempt stopping here to
	// give up its room (read and written by the session loop only).
	deferred waitingDispatches
	// stateLock holds the state directory for this process (see lockStateDir).
	stateLock *os.File
	beats     *heartbeater
}

// New checks opt and builds a Worker; nothing is contacted yet.
func New(opt Options) (*Worker, error) {
	opt.setDefaults()
	var errs []error
	if opt.URL == "" {
		errs = append(errs, errors.New("orchestrator url is not set"))
	}
	if opt.Token == "" {
		errs = append(errs, errors.New("worker token is not set"))
	}
	if opt.StateDir == "" {
		errs = append(errs, errors.New("state_dir is not set"))
	}
	if len(opt.Command) == 0 {
		errs = append(errs, errors.New("job command is empty"))
	}
	if opt.ReconnectMax <= 0 {
		errs = append(errs, errors.New("reconnect_max must be positive"))
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	c, err := orchclient.New(opt.URL, opt.Token, orchclient.TLS{CAFile: opt.CAFile, CertFile: opt.CertFile, KeyFile: opt.KeyFile,
		InsecureSkipVerify: opt.InsecureSkipVerify})
	if err != nil {
		return nil, err
	}
	if opt.Checkpoints.Keep <= 0 {
		opt.Checkpoints.Keep = config.DefaultKeepCheckpoints
	}
	if opt.Checkpoints.Scan <= 0 {
		opt.Checkpoints.Scan = config.DefaultCheckpointScanInterval
	}
	gpus := newGPUWatch(opt.GPU, opt.StateDir, opt.Logger)
	slots := newAllotment(gpus)
	w := &Worker{
		opt:      opt,
		log:      opt.Logger,
		c:        c,
		iso:      opt.Isolation,
		gpus:     gpus,
		msgs:     make(chan any, 256),
		loopDone: make(chan struct{}),
		slots:    slots,
		books:    newLedger(slots),
		link:     newLink(&opt),
		jobSettings: JobSettings{Command: opt.Command, Env: opt.JobEnv, PassEnv: opt.PassEnv, CancelGrace: opt.CancelGrace,
			OwnCancelGrace: opt.OwnCancelGrace, LogLimitBytes: opt.LogLimitBytes, Checkpoints: opt.Checkpoints},
	}
	w.out = &outbox{spool: &statusSpool{dir: filepath.Join(opt.StateDir, "spool")}, c: c, gpus: gpus, log: w.log,
		timers: &w.opt.Timers, books: w.books, link: w.link, held: map[string]bool{}}
	w.beats = &heartbeater{opt: &w.opt, log: w.log, c: c, link: w.link, books: w.books, gpus: gpus,
		draining: w.localDrain.Load, post: w.post, now: make(chan struct{}, 1), clockOffset: clockOffsetFromEnv()}
	w.runnerEnv = runnerEnv{
		opt: &w.opt, log: w.log, c: c, iso: w.iso, gpus: gpus, out: w.out, wg: &w.wg,
		keeper: keeper.New(keeper.Options{API: c, WorkDir: opt.WorkDir, Log: opt.Logger,
			BytesPerSecond: opt.Checkpoints.BytesPerSecond, RequestTimeout: opt.Timers.RequestTimeout,
			RetryBase: opt.Timers.ReconnectBase}),
		crash:    crashHookFromEnv(),
		post:     w.post,
		reported: w.books.reported,
	}
	return w, nil
}

// ErrMisconfigured is returned by Start for a setting it cannot work with;
// only an admin's change can help.
var ErrMisconfigured = errors.New("configuration error")

// Start prepares the state directories and reads the GPU inventory. It does not
// need the orchestrator: a worker that cannot reach it yet is still started and
// keeps trying.
func (w *Worker) Start(ctx context.Context) error {
	// Jobs running as other uids must pass through the state and work
	// directories to reach their own (search only: they cannot list them);
	// the spool holds every job's output and stays workerd's alone.
	for _, d := range []struct {
		path string
		mode os.FileMode
	}{{w.opt.StateDir, 0o711}, {w.out.spool.dir, 0o700}, {w.opt.WorkDir, 0o711}} {
		if err := os.MkdirAll(d.path, d.mode); err != nil {
			return fmt.Errorf("state directory: %w", err)
		}
		if err := os.Chmod(d.path, d.mode); err != nil {
			return fmt.Errorf("state directory: %w", err)
		}
	}
	lock, err := lockStateDir(w.opt.StateDir)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrMisconfigured, err)
	}
	w.stateLock = lock
	id, err := installationID(w.opt.StateDir)
	if err != nil {
		return err
	}
	w.c.SetSession(id)
	if err := w.iso.CheckReachable(w.opt.WorkDir); err != nil {
		return fmt.Errorf("%w: job.work_dir: %w", ErrMisconfigured, err)
	}
	w.out.spool.clean()
	recs, errs := w.out.spool.list() // reports a previous run could not deliver
	for _, err := range errs {
		w.log.Warn("status spool", "err", err)
	}
	for _, rec := range recs {
		w.books.noteFinishing(rec)
	}
	inv, err := w.opt.GPU.Inventory()
	if err != nil {
		w.log.Warn("cannot read the GPU inventory; reporting 0 GPUs", "err", err)
		inv = gpu.Inventory{}
	}
	if err := w.gpus.start(inv); err != nil {
		return fmt.Errorf("%w: %w", ErrMisconfigured, err)
	}
	w.slots.setInventory(inv, w.opt.MaxJobs)
	w.link.progressed()
	if w.opt.InsecureSkipVerify {
		w.log.Warn("TLS verification of the orchestrator is off (orchestrator.insecure_skip_verify): anyone on the path " +
			"can pose as the orchestrator and receive this worker's token and its jobs' secrets; set ca_file instead")
	}
	names := make([]string, 0, len(inv.Devices))
	for _, d := range inv.Devices {
		names = append(names, d.Name)
	}
	w.log.Info("worker configured",
		"orchestrator", w.opt.URL, "token", tokenHint(w.c.Token().Get()), "client_cert", w.opt.CertFile, "name", w.opt.Name,
		"persistent", w.opt.Persistent, "gpus", inv.Count, "gpu_names", strings.Join(names, ", "),
		"state_dir", w.opt.StateDir, "work_dir", w.opt.WorkDir)
	return ctx.Err()
}

// Drain asks the worker to finish its current job, take no new one, and exit.
// It does not block.
func (w *Worker) Drain() {
	first := !w.localDrain.Swap(true)
	if first && w.opt.DrainTimeout > 0 {
		time.AfterFunc(w.opt.DrainTimeout, func() { w.post(drainExpired{}) })
	}
	w.beats.soon() // tell the orchestrator now (the heartbeat says draining)
	select {
	case w.msgs <- drainRequested{}:
	default: // the loop is busy or gone; it checks localDrain whenever a job ends
	}
}

// SetJobSettings replaces the settings of jobs not yet started; a running job
// keeps the ones it started with.
func (w *Worker) SetJobSettings(js JobSettings) error {
	if len(js.Command) == 0 {
		return errors.New("job command is empty")
	}
	w.mu.Lock()
	w.jobSettings = js
	w.mu.Unlock()
	w.runnerEnv.keeper.SetRate(js.Checkpoints.BytesPerSecond)
	return nil
}

func (w *Worker) currentJobSettings() JobSettings {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.jobSettings
}

// Status is one line for systemd's STATUS=.
func (w *Worker) Status() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var parts []string
	workerID, reconnecting := w.link.state()
	running := w.slots.running()
	switch {
	case len(running) == 1:
		parts = append(parts, fmt.Sprintf("running job %s (attempt %d)", running[0].jobID, running[0].n))
	case len(running) > 1:
		ids := make([]string, len(running))
		for i, a := range running {
			ids[i] = a.jobID
		}
		parts = append(parts, fmt.Sprintf("running %d jobs (%s)", len(running), strings.Join(ids, ", ")))
	case w.localDrain.Load() || w.orchDrain:
		parts = append(parts, "draining")
	case workerID == "":
		parts = append(parts, "not connected: connecting to "+w.opt.URL)
	default:
		parts = append(parts, "idle")
	}
	if len(running) > 0 && (w.localDrain.Load() || w.orchDrain) {
		parts = append(parts, "draining")
	}
	if reconnecting > 0 {
		parts = append(parts, fmt.Sprintf("reconnecting (attempt %d)", reconnecting))
	}
	return strings.Join(parts, "; ")
}

// Healthy is nil while heartbeats are acknowledged, or while the worker is
// visibly trying to reconnect; a loop that stopped doing either is unhealthy and
// systemd's watchdog restarts it.
func (w *Worker) Healthy() error {
	return w.link.healthy(w.opt.Timers.RequestTimeout, w.opt.ReconnectMax)
}
