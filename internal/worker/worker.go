// Package worker is simpletuner-workerd's engine: it registers with the
// orchestrator, holds the SSE stream, heartbeats, runs training jobs (one per GPU
// slot) each as a process tree, ships the job's log and reports how it ended (protocol 2
// of docs/protocol.md).
//
// Shape: one session loop (Serve) owns all decisions; everything that waits on
// the network or on a process (the stream reader, the heartbeat, the log shipper,
// report senders, the process waiter) runs on its own goroutine and posts a message
// to the loop. Nothing the trainer does can stall heartbeats or the stream.
//
// Files on disk, under Options.StateDir/spool: <job>-<attempt>.log (the job's
// output, shipped from there) and reports.jsonl (the terminal reports not yet
// acknowledged; re-sent until the orchestrator answers 2xx or 409).
package worker

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/config"
	"github.com/simpletuner/simpletuner-orchestration/internal/gpu"
	"github.com/simpletuner/simpletuner-orchestration/internal/isolation"
	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
)

// Options configure a Worker. OptionsFrom fills them from the
// configuration, whose defaults are the only built-in values of the settings
// an admin can change; Timers are internal and have their defaults here.
type Options struct {
	URL                string // http(s)://host:port or unix:///path/to.sock
	Token              string
	CAFile             string
	CertFile, KeyFile  string // client certificate for mutual TLS
	InsecureSkipVerify bool

	Name       string // "" → hostname
	Persistent bool
	// OwnType: Persistent was set in this worker's configuration. Otherwise
	// the worker adopts the type an admin gave it, from the registration reply.
	OwnType  bool
	Labels   map[string]string
	StateDir string
	Version  string // reported at registration
	// MaxJobs is how many jobs run at once; 0: one per GPU (one without GPUs).
	MaxJobs int

	Command     []string      // the job command
	WorkDir     string        // "" → <StateDir>/jobs
	CancelGrace time.Duration // SIGTERM → SIGKILL, unless the orchestrator says otherwise
	// OwnCancelGrace: CancelGrace was set in this worker's configuration and
	// overrides the orchestrator's for jobs here.
	OwnCancelGrace bool
	JobEnv         map[string]string // [job] env
	PassEnv        []string          // [job] pass_env
	LogLimitBytes  int64             // stop shipping a job's log after this many bytes; 0 no limit

	// SelfFenceAfter stops the running job when no heartbeat has been
	// acknowledged for this long. The effective limit is also kept below the
	// heartbeat timeout the orchestrator announces at registration (see
	// fenceLimit), so the job is stopped here before the orchestrator gives it
	// to another worker. 0 leaves the orchestrator's timeout alone to decide.
	SelfFenceAfter time.Duration
	// DrainTimeout bounds a drain started by Drain (a stop signal): jobs
	// still running then are stopped with their grace. 0: no bound.
	DrainTimeout time.Duration
	ReconnectMax time.Duration // back-off cap

	GPU gpu.Source // nil → gpu.None()
	// GPUWatchInterval is how often the GPUs' health is read, held GPUs are
	// checked again and the jobs' GPU use is sampled ([gpu] watch_interval).
	GPUWatchInterval time.Duration
	Logger           *slog.Logger // nil → slog.Default()
	// Isolation starts jobs behind their walls; nil → each job is a plain
	// process group running as workerd's own user (tests in one process).
	Isolation *isolation.Isolator

	// Environ returns workerd's environment, of which jobs inherit what
	// jobEnv allows; nil → os.Environ.
	Environ func() []string

	// TokenSource re-reads the worker token from where it came from (the
	// token file, the systemd credential, the configuration file) and says
	// where that is. With it, a token rotated while workerd runs is picked
	// up after the orchestrator refuses the old one; nil: the token cannot
	// change and a 401 ends the worker.
	TokenSource func() (token, where string, err error)

	Timers Timers
}

// JobSettings are the options that apply to each job as it starts; a
// configuration reload may replace them (SetJobSettings) and the jobs started
// afterwards use the new ones.
type JobSettings struct {
	Command []string
	Env     map[string]string
	PassEnv []string // more of workerd's environment jobs inherit (see inherits)
	// CancelGrace is SIGTERM → SIGKILL. The orchestrator sends its own grace
	// with each job and cancel; this one overrides it only when an admin set
	// it in this worker's configuration (OwnCancelGrace).
	CancelGrace    time.Duration
	OwnCancelGrace bool
	LogLimitBytes  int64 // 0 no limit
}

// JobSettingsFrom picks the per-job settings out of a configuration.
func JobSettingsFrom(cfg *config.Worker) JobSettings {
	return JobSettings{Command: cfg.Job.Command, Env: cfg.Job.Env, PassEnv: cfg.Job.PassEnv, CancelGrace: cfg.Job.CancelGrace.Duration,
		OwnCancelGrace: cfg.Origin("job.cancel_grace") != "", LogLimitBytes: max(cfg.Job.LogLimitBytes, 0)}
}

// grace is the SIGTERM → SIGKILL grace for a job, given the seconds the
// orchestrator asked for (0 when it did not say).
func (js JobSettings) grace(orchestratorSeconds float64) time.Duration {
	if js.OwnCancelGrace || orchestratorSeconds <= 0 {
		return js.CancelGrace
	}
	return time.Duration(orchestratorSeconds * float64(time.Second))
}

// OptionsFrom maps a loaded configuration onto the worker's options. The
// token, GPU source, logger and version are the caller's to add.
func OptionsFrom(cfg *config.Worker) Options {
	return Options{
		URL:                cfg.Orchestrator.URL,
		Token:              cfg.Orchestrator.Token.Value(),
		CAFile:             cfg.Orchestrator.CAFile,
		CertFile:           cfg.Orchestrator.CertFile,
		KeyFile:            cfg.Orchestrator.KeyFile,
		InsecureSkipVerify: cfg.Orchestrator.InsecureSkipVerify,
		Name:               cfg.Worker.Name,
		Persistent:         cfg.Worker.Persistent,
		OwnType:            cfg.Origin("worker.persistent") != "",
		Labels:             cfg.Worker.Labels,
		StateDir:           cfg.Worker.StateDir,
		MaxJobs:            cfg.Worker.MaxJobs,
		Command:            cfg.Job.Command,
		WorkDir:            cfg.Job.WorkDir,
		CancelGrace:        cfg.Job.CancelGrace.Duration,
		OwnCancelGrace:     cfg.Origin("job.cancel_grace") != "",
		JobEnv:             cfg.Job.Env,
		PassEnv:            cfg.Job.PassEnv,
		LogLimitBytes:      cfg.Job.LogLimitBytes,
		SelfFenceAfter:     cfg.Worker.SelfFenceAfter.Duration,
		DrainTimeout:       cfg.Worker.DrainTimeout.Duration,
		ReconnectMax:       cfg.Worker.ReconnectMax.Duration,
		GPUWatchInterval:   cfg.GPU.WatchInterval.Duration,
	}
}

// Timers are the worker's internal timings; tests shrink them.
type Timers struct {
	ReconnectBase     time.Duration // first back-off step (1s)
	HeartbeatInterval time.Duration // 0 → what the orchestrator says at registration, else the default interval
	PingInterval      time.Duration // the orchestrator's ping interval when it does not announce one (15s); 3× silence → reconnect
	StableAfter       time.Duration // a stream up this long resets the back-off (30s)
	ReportRetry       time.Duration // re-send spooled terminal reports this often (15s)
	LogPoll           time.Duration // the log shipper's poll interval (1s)
	LogDrain          time.Duration // wait this long for the log to ship before the terminal report (10s)
	RequestTimeout    time.Duration // heartbeat, status, queue (10s); register takes 3×
	ShutdownTimeout   time.Duration // final report and disconnect on the way out (5s)
	TokenPoll         time.Duration // re-read the token's source this often while the token is refused (1s)
	// GPUSettle is how long an ended job's GPUs may take to drop its
	// processes before they are held back (3s).
	GPUSettle time.Duration
}

func (o *Options) setDefaults() {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	t := &o.Timers
	def(&t.ReconnectBase, time.Second)
	def(&t.PingInterval, config.DefaultPingInterval)
	def(&t.StableAfter, 30*time.Second)
	def(&t.ReportRetry, 15*time.Second)
	def(&t.LogPoll, time.Second)
	def(&t.LogDrain, 10*time.Second)
	def(&t.RequestTimeout, 10*time.Second)
	def(&t.ShutdownTimeout, 5*time.Second)
	def(&t.TokenPoll, time.Second)
	def(&t.GPUSettle, 3*time.Second)
	def(&o.GPUWatchInterval, config.DefaultGPUWatchInterval)
	if o.LogLimitBytes < 0 {
		o.LogLimitBytes = 0 // logSpool: 0 means unlimited
	}
	if o.GPU == nil {
		o.GPU = gpu.None()
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Environ == nil {
		o.Environ = os.Environ
	}
	if o.Isolation == nil {
		o.Isolation, _ = isolation.New(isolation.Config{Mode: isolation.ModeProcessGroup,
			Log: slog.New(slog.DiscardHandler)})
	}
	if o.Name == "" {
		o.Name, _ = os.Hostname()
	}
	if o.WorkDir == "" && o.StateDir != "" {
		o.WorkDir = filepath.Join(o.StateDir, "jobs")
	}
}

// Worker implements daemon.App (Start, Serve, Healthy, Status, Reload, Drain).
type Worker struct {
	opt   Options
	log   *slog.Logger
	c     *client
	iso   *isolation.Isolator
	spool *statusSpool
	gpus  *gpuWatch

	msgs     chan any      // to the session loop
	loopDone chan struct{} // closed when the loop stops reading msgs
	wg       sync.WaitGroup
	flushMu  sync.Mutex // one spool flush at a time

	stopHeartbeats func(context.Context) // set by Serve: stops the heartbeat goroutine and waits

	registered     chan struct{} // closed at the first successful registration
	registeredOnce sync.Once

	mu           sync.Mutex // guards the fields below (read by Status, Healthy, heartbeat)
	inv          gpu.Inventory
	workerID     string
	hbInterval   time.Duration
	pingInterval time.Duration       // the stream's keep-alive interval the orchestrator announced; 0: Timers.PingInterval
	jobs         map[string]*attempt // running attempts by job id
	maxJobs      int                 // how many may run at once (see effectiveMaxJobs)
	localDrain   bool                // Drain(): finish the job, then exit
	orchDrain    bool                // the orchestrator said drain
	connected    bool                // the stream is open
	retries      int                 // reconnect attempts since the last good connection
	lastAck      time.Time           // when the last request the orchestrator answered was sent
	lastProgress time.Time           // the loop or a reconnect attempt did something
	jobSettings  JobSettings
	persistent   bool          // the worker's type in force: its own, or the admin's
	fenceAfter   time.Duration // effective self-fence limit (see fenceLimit)
	held         map[string]bool
	// finishing holds the ended attempts whose terminal report is not yet
	// acknowledged, by key. Heartbeats and registrations list them, so the
	// orchestrator never takes an attempt for lost while its outcome is on the
	// way. Self-fenced attempts are left out: they must be reconciled as lost.
	finishing map[string]statusRecord
	// unreconciled holds the keys of self-fenced attempts that no registration
	// has left out yet: their cancelled reports wait until one has, so the
	// orchestrator first takes the attempt for lost and requeues the job.
	unreconciled map[string]bool
	// stateLock holds the state directory for this process (see lockStateDir).
	stateLock *os.File
	crash     *crashHook // the fault suite's crash hook; nil in production
	// hbNow asks the heartbeat goroutine for a heartbeat now (a drain began).
	hbNow chan struct{}
	// clockOffset shifts the wall clock workerd reports (a fault-suite hook).
	clockOffset time.Duration
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
	c, err := newClient(opt.URL, opt.Token, tlsFiles{CAFile: opt.CAFile, CertFile: opt.CertFile, KeyFile: opt.KeyFile,
		InsecureSkipVerify: opt.InsecureSkipVerify})
	if err != nil {
		return nil, err
	}
	return &Worker{
		opt:          opt,
		log:          opt.Logger,
		c:            c,
		iso:          opt.Isolation,
		spool:        &statusSpool{dir: filepath.Join(opt.StateDir, "spool")},
		gpus:         newGPUWatch(opt.GPU, opt.StateDir, opt.Logger),
		msgs:         make(chan any, 256),
		loopDone:     make(chan struct{}),
		registered:   make(chan struct{}),
		held:         map[string]bool{},
		jobs:         map[string]*attempt{},
		maxJobs:      1,
		finishing:    map[string]statusRecord{},
		unreconciled: map[string]bool{},
		fenceAfter:   opt.SelfFenceAfter,
		jobSettings: JobSettings{Command: opt.Command, Env: opt.JobEnv, PassEnv: opt.PassEnv, CancelGrace: opt.CancelGrace,
			OwnCancelGrace: opt.OwnCancelGrace, LogLimitBytes: opt.LogLimitBytes},
		persistent:  opt.Persistent,
		crash:       crashHookFromEnv(),
		hbNow:       make(chan struct{}, 1),
		clockOffset: clockOffsetFromEnv(),
	}, nil
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
	}{{w.opt.StateDir, 0o711}, {w.spool.dir, 0o700}, {w.opt.WorkDir, 0o711}} {
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
	w.c.session.Store(&id)
	if err := w.iso.CheckReachable(w.opt.WorkDir); err != nil {
		return fmt.Errorf("%w: job.work_dir: %w", ErrMisconfigured, err)
	}
	w.spool.clean()
	recs, errs := w.spool.list() // reports a previous run could not deliver
	for _, err := range errs {
		w.log.Warn("status spool", "err", err)
	}
	w.mu.Lock()
	for _, rec := range recs {
		w.noteFinishingLocked(rec)
	}
	w.mu.Unlock()
	inv, err := w.opt.GPU.Inventory()
	if err != nil {
		w.log.Warn("cannot read the GPU inventory; reporting 0 GPUs", "err", err)
		inv = gpu.Inventory{}
	}
	if err := w.gpus.start(inv); err != nil {
		return fmt.Errorf("%w: %w", ErrMisconfigured, err)
	}
	now := time.Now()
	w.mu.Lock()
	w.inv = inv
	w.maxJobs = effectiveMaxJobs(w.opt.MaxJobs, inv)
	w.lastProgress = now
	w.mu.Unlock()
	if w.opt.InsecureSkipVerify {
		w.log.Warn("TLS verification of the orchestrator is off (orchestrator.insecure_skip_verify): anyone on the path " +
			"can pose as the orchestrator and receive this worker's token and its jobs' secrets; set ca_file instead")
	}
	names := make([]string, 0, len(inv.Devices))
	for _, d := range inv.Devices {
		names = append(names, d.Name)
	}
	w.log.Info("worker configured",
		"orchestrator", w.opt.URL, "token", tokenHint(w.c.tok.get()), "client_cert", w.opt.CertFile, "name", w.opt.Name,
		"persistent", w.opt.Persistent, "gpus", inv.Count, "gpu_names", strings.Join(names, ", "),
		"state_dir", w.opt.StateDir, "work_dir", w.opt.WorkDir)
	return ctx.Err()
}

// hasRegistered reports whether this process has registered at least once.
func (w *Worker) hasRegistered() bool {
	select {
	case <-w.registered:
		return true
	default:
		return false
	}
}

// noteFinishingLocked records an ended attempt whose report is outstanding.
// w.mu is held.
func (w *Worker) noteFinishingLocked(rec statusRecord) {
	if !rec.AfterRegister {
		w.finishing[rec.key()] = rec
	}
}

// reported forgets an attempt once its report was acknowledged or given up.
func (w *Worker) reported(key string) {
	w.mu.Lock()
	delete(w.finishing, key)
	w.mu.Unlock()
}

// answeredLocked lists the running attempts the worker tells the orchestrator
// about: all but the self-fenced ones. w.mu is held.
func (w *Worker) answeredLocked() []*attempt {
	return slices.DeleteFunc(w.runningLocked(), func(a *attempt) bool { return a.fenced })
}

// attemptsLocked lists the attempts this worker answers for: the running ones
// first, then the finishing ones. w.mu is held.
func (w *Worker) attemptsLocked() []protocol.RunningAttempt {
	var out, finishing []protocol.RunningAttempt
	for _, a := range w.answeredLocked() {
		out = append(out, protocol.RunningAttempt{JobID: a.jobID, Attempt: a.n, State: protocol.AttemptRunning})
	}
	for _, rec := range w.finishing {
		finishing = append(finishing, protocol.RunningAttempt{JobID: rec.JobID, Attempt: rec.Attempt,
			State: protocol.AttemptFinishing, Outcome: rec.Status})
	}
	slices.SortFunc(finishing, func(a, b protocol.RunningAttempt) int {
		return cmp.Or(strings.Compare(a.JobID, b.JobID), a.Attempt-b.Attempt)
	})
	return append(out, finishing...)
}

func (w *Worker) isPersistent() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.persistent
}

func (w *Worker) fenceLimit() time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.fenceAfter
}

// Drain asks the worker to finish its current job, take no new one, and exit.
// It does not block.
func (w *Worker) Drain() {
	w.mu.Lock()
	first := !w.localDrain
	w.localDrain = true
	w.mu.Unlock()
	if first && w.opt.DrainTimeout > 0 {
		time.AfterFunc(w.opt.DrainTimeout, func() { w.post(drainExpired{}) })
	}
	select { // tell the orchestrator now (the heartbeat says draining)
	case w.hbNow <- struct{}{}:
	default:
	}
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
	running := w.runningLocked()
	switch {
	case len(running) == 1:
		parts = append(parts, fmt.Sprintf("running job %s (attempt %d)", running[0].jobID, running[0].n))
	case len(running) > 1:
		ids := make([]string, len(running))
		for i, a := range running {
			ids[i] = a.jobID
		}
		parts = append(parts, fmt.Sprintf("running %d jobs (%s)", len(running), strings.Join(ids, ", ")))
	case w.localDrain || w.orchDrain:
		parts = append(parts, "draining")
	case w.workerID == "":
		parts = append(parts, "not connected: connecting to "+w.opt.URL)
	default:
		parts = append(parts, "idle")
	}
	if len(running) > 0 && (w.localDrain || w.orchDrain) {
		parts = append(parts, "draining")
	}
	if !w.connected && w.retries > 0 {
		parts = append(parts, fmt.Sprintf("reconnecting (attempt %d)", w.retries))
	}
	return strings.Join(parts, "; ")
}

// Healthy is nil while heartbeats are acknowledged, or while the worker is
// visibly trying to reconnect; a loop that stopped doing either is unhealthy and
// systemd's watchdog restarts it.
func (w *Worker) Healthy() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	hb := w.hbInterval
	if hb <= 0 {
		hb = config.DefaultHeartbeatInterval
	}
	if !w.lastAck.IsZero() && time.Since(w.lastAck) < 3*hb+w.opt.Timers.RequestTimeout {
		return nil
	}
	limit := w.opt.ReconnectMax + 3*w.opt.Timers.RequestTimeout + hb
	if since := time.Since(w.lastProgress); since > limit {
		return fmt.Errorf("no heartbeat acknowledged and no reconnect attempt for %s", since.Round(time.Second))
	}
	return nil
}
