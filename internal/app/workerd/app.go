package workerd

import (
	"log/slog"
	"os"
	"reflect"
	"strings"

	"github.com/simpletuner/simpletuner-orchestration/internal/config"
	"github.com/simpletuner/simpletuner-orchestration/internal/gpu"
	"github.com/simpletuner/simpletuner-orchestration/internal/isolation"
	"github.com/simpletuner/simpletuner-orchestration/internal/version"
	"github.com/simpletuner/simpletuner-orchestration/internal/worker"
)

// App is the worker daemon: the worker engine plus what a reload may change.
type App struct {
	*worker.Worker
	args    []string
	getenv  func(string) string
	log     *slog.Logger
	level   *slog.LevelVar
	started *config.Worker // settings that need a restart are compared against it
	applied *config.Worker // the configuration last loaded (reloads log what differs)
	gpus    gpu.Source
	iso     *isolation.Isolator
}

// New builds the worker for a loaded configuration; args and getenv are kept
// for reloads, level changes the logger's level live.
func New(cfg *config.Worker, args []string, getenv func(string) string, log *slog.Logger, level *slog.LevelVar) (*App, error) {
	isoCfg := IsolationConfig(cfg, log)
	if exe, err := os.Executable(); err == nil {
		isoCfg.Reaper = []string{exe, isolation.ReaperArg}
		isoCfg.Gate = []string{exe, isolation.GateArg}
	} else {
		log.Warn("cannot find own executable; no reaper ends the jobs if workerd is killed", "err", err)
	}
	iso, err := isolation.New(isoCfg)
	if err != nil {
		return nil, err
	}
	log.Info("job isolation", "mode", iso.Name(), "walls", iso.Describe())
	gpus := gpuSource(cfg.GPU, log)
	opt := worker.OptionsFrom(cfg)
	opt.Version, opt.GPU, opt.Logger, opt.Isolation = version.Version, gpus, log, iso
	if getenv == nil {
		getenv = os.Getenv
	}
	a := &App{args: args, getenv: getenv, log: log, level: level, started: cfg, applied: cfg, gpus: gpus, iso: iso}
	if cfg.TokenRereadable() {
		opt.TokenSource = a.readToken
	}
	w, err := worker.New(opt)
	if err != nil {
		gpus.Close()
		iso.Close()
		return nil, err
	}
	a.Worker = w
	if js := worker.JobSettingsFrom(cfg); js.OwnCancelGrace {
		log.Info("job.cancel_grace is set in this worker's configuration; it overrides the orchestrator's for jobs here",
			"cancel_grace", js.CancelGrace.String(), "set_in", cfg.Origin("job.cancel_grace"))
	}
	return a, nil
}

// readToken re-reads the worker token the way a start would find it, and
// says where it is: the token file, the credential, or the configuration
// file's line.
func (a *App) readToken() (string, string, error) {
	cfg, err := a.load()
	if err != nil {
		return "", "", err
	}
	where := cfg.Origin("orchestrator.token")
	creds := a.getenv("CREDENTIALS_DIRECTORY")
	switch {
	case where != "" && where == cfg.Origin("orchestrator.token_file"):
		where = cfg.Orchestrator.TokenFile
	case creds != "" && strings.HasPrefix(where, creds+"/"):
		where += " (a systemd credential: systemd copies it when the unit starts and never again, " +
			"so a new token there takes a restart; set [orchestrator] token_file to take it at once)"
	}
	return cfg.Orchestrator.Token.Value(), where, nil
}

// load reads the configuration the way a start would, with every required
// key checked.
func (a *App) load() (*config.Worker, error) {
	cfg, _, err := config.LoadWorker(a.args, a.getenv)
	if err == nil {
		err = cfg.Require()
	}
	return cfg, err
}

// IsolationConfig maps the [job] settings onto the job isolation's.
func IsolationConfig(cfg *config.Worker, log *slog.Logger) isolation.Config {
	return isolation.Config{Mode: cfg.Job.Isolation, User: cfg.Job.User, UIDRange: cfg.Job.UIDRange,
		Limits: isolation.Limits{MemoryMax: cfg.Job.MemoryMaxBytes(), TasksMax: cfg.Job.TasksMax}, Log: log}
}

// Close releases the GPU backend and the jobs' cgroups and stops the reaper.
func (a *App) Close() {
	_ = a.gpus.Close()
	a.iso.Close()
}

// Reload re-reads the configuration (SIGHUP). The log level and the job
// settings (command, environment, cancel grace, log limit) apply at once to
// jobs that start afterwards; a running job keeps what it started with.
// Every other key needs a restart, and each reload warns about every such key
// that differs from what the daemon started with. A drain in progress is
// neither started nor cancelled by a reload. An invalid file keeps the
// running configuration.
func (a *App) Reload() error {
	cfg, err := a.load()
	if err != nil {
		return err
	}
	if err := a.SetJobSettings(worker.JobSettingsFrom(cfg)); err != nil {
		return err
	}
	a.level.Set(cfg.Log.SlogLevel())
	for _, c := range config.Changes(a.applied, cfg) {
		a.log.Info("configuration changed", "key", c.Key, "old", c.Old, "new", c.New, "set_at", cfg.Origin(c.Key))
	}
	a.applied = cfg
	for _, key := range restartKeys(a.started, cfg) {
		a.log.Warn("config change needs a restart to take effect", "key", key)
	}
	a.log.Info("configuration reloaded", "log_level", cfg.Log.Level, "job_command", cfg.Job.Command)
	if a.started.TokenRereadable() {
		a.CheckToken()
	}
	return nil
}

// restartKeys names the settings that differ between the running and a new
// configuration and only take effect after a restart.
func restartKeys(running, next *config.Worker) []string {
	var out []string
	for _, c := range []struct {
		name     string
		old, new any
	}{
		{"orchestrator", withoutToken(running.Orchestrator), withoutToken(next.Orchestrator)},
		{"worker.name", running.Worker.Name, next.Worker.Name},
		{"worker.persistent", running.Worker.Persistent, next.Worker.Persistent},
		{"worker.labels", running.Worker.Labels, next.Worker.Labels},
		{"worker.state_dir", running.Worker.StateDir, next.Worker.StateDir},
		{"worker.self_fence_after", running.Worker.SelfFenceAfter, next.Worker.SelfFenceAfter},
		{"worker.reconnect_max", running.Worker.ReconnectMax, next.Worker.ReconnectMax},
		{"worker.drain_timeout", running.Worker.DrainTimeout, next.Worker.DrainTimeout},
		{"worker.max_jobs", running.Worker.MaxJobs, next.Worker.MaxJobs},
		{"job.work_dir", running.Job.WorkDir, next.Job.WorkDir},
		{"job.isolation", running.Job.Isolation, next.Job.Isolation},
		{"job.user", running.Job.User, next.Job.User},
		{"job.uid_range", running.Job.UIDRange, next.Job.UIDRange},
		{"job.memory_max", running.Job.MemoryMax, next.Job.MemoryMax},
		{"job.tasks_max", running.Job.TasksMax, next.Job.TasksMax},
		{"gpu", running.GPU, next.GPU},
		{"log.format", running.Log.Format, next.Log.Format},
	} {
		if !reflect.DeepEqual(c.old, c.new) {
			out = append(out, c.name)
		}
	}
	return out
}

// withoutToken is [orchestrator] less the token and where it comes from: a
// new token is taken without a restart (see readToken).
func withoutToken(c config.ConnectionConfig) config.ConnectionConfig {
	c.Token, c.TokenFile = "", ""
	return c
}
