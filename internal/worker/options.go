package worker

import (
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/config"
	"github.com/simpletuner/simpletuner-orchestration/internal/gpu"
	"github.com/simpletuner/simpletuner-orchestration/internal/isolation"
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
	// Checkpoints keeps jobs' checkpoints in their artifacts; the zero
	// value keeps none.
	Checkpoints CheckpointSettings

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
	Checkpoints    CheckpointSettings
}

// JobSettingsFrom picks the per-job settings out of a configuration.
func JobSettingsFrom(cfg *config.Worker) JobSettings {
	return JobSettings{Command: cfg.Job.Command, Env: cfg.Job.Env, PassEnv: cfg.Job.PassEnv, CancelGrace: cfg.Job.CancelGrace.Duration,
		OwnCancelGrace: cfg.Origin("job.cancel_grace") != "", LogLimitBytes: max(cfg.Job.LogLimitBytes, 0),
		Checkpoints: checkpointSettingsFrom(cfg)}
}

func checkpointSettingsFrom(cfg *config.Worker) CheckpointSettings {
	return CheckpointSettings{Enabled: cfg.Job.Checkpoints, Keep: cfg.Job.KeepCheckpoints,
		Scan: cfg.Job.CheckpointScanInterval.Duration, ScanOnly: !cfg.Job.CheckpointWatch, BytesPerSecond: cfg.Job.CheckpointUploadBytesPerSecond(),
		OnShutdown: cfg.Job.ShutdownCheckpointTimeout.Duration}
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
		Checkpoints:        checkpointSettingsFrom(cfg),
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
