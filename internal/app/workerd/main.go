// Package workerd assembles simpletuner-workerd: it loads the configuration,
// picks the GPU inventory backend, builds the worker engine and hands it to
// daemon.Run as a daemon.App. cmd/simpletuner-workerd only calls Main (and
// the jobs' reaper, when workerd re-executes itself as one).
package workerd

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/config"
	"github.com/simpletuner/simpletuner-orchestration/internal/daemon"
	"github.com/simpletuner/simpletuner-orchestration/internal/gpu"
	"github.com/simpletuner/simpletuner-orchestration/internal/isolation"
	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
	"github.com/simpletuner/simpletuner-orchestration/internal/version"
	"github.com/simpletuner/simpletuner-orchestration/internal/worker"
)

// Exit statuses of simpletuner-workerd. A bad command line is 2, as for
// simpletuner-orchestratord and simpletunerctl, and a refused credential 4,
// as for simpletunerctl.
const (
	ExitOK     = 0 // a clean stop: signal, drain, an ephemeral worker with no more jobs
	ExitConfig = 1 // a configuration or start-up error, a URL that is not an orchestrator's or redirects elsewhere, a client certificate missing or refused
	ExitUsage  = 2 // an unknown flag, a flag without its value, an argument
	ExitFailed = 3 // any other failure
	ExitAuth   = 4 // the orchestrator rejected the worker token (401)
)

// tokenFlagWarning is said whenever the token comes from --worker-token.
const tokenFlagWarning = "simpletuner-workerd: warning: a token given as --worker-token can be read by every user of this " +
	"machine in ps and /proc/<pid>/cmdline until workerd hides it, and stays in the shell's history; put it in " +
	config.DefaultWorkerTokenFile + " (the default token_file, mode 0600), a systemd credential, or SIMPLETUNER_WORKER_TOKEN instead"

// usage is what --help prints.
func usage() string {
	return `Usage:
  simpletuner-workerd [flags]   register with the orchestrator and run the jobs it sends

Flags:
` + config.WorkerFlagHelp() + `
See simpletuner-workerd(8) and simpletuner-workerd.toml(5).
`
}

// Main runs the program with args (without the program name) and returns its
// exit status.
func Main(args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	cfg, opts, err := config.LoadWorker(args, getenv)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(stdout, usage())
		return ExitOK
	}
	if opts.Version {
		fmt.Fprintln(stdout, "simpletuner-workerd", version.Version)
		return ExitOK
	}
	if _, ok := errors.AsType[*config.UsageError](err); !ok && len(opts.Args) > 0 {
		err = &config.UsageError{Err: fmt.Errorf("unexpected argument %q: simpletuner-workerd takes flags only (see --help)", opts.Args[0])}
	}
	if _, ok := errors.AsType[*config.UsageError](err); ok {
		fmt.Fprintf(stderr, "simpletuner-workerd: %v\n", err)
		return ExitUsage
	}
	if err != nil {
		if opts.CheckConfig {
			err = cfg.WithRequired(err) // every mistake at once
		}
		fmt.Fprintf(stderr, "simpletuner-workerd: configuration error:\n%v\n", err)
		return ExitConfig
	}
	if cfg.Origin("orchestrator.token") == "--worker-token" {
		fmt.Fprintln(stderr, tokenFlagWarning)
	}
	if opts.CheckConfig {
		fmt.Fprint(stdout, cfg.Redacted())
		fmt.Fprintf(stdout, "\n# job isolation here: %s\n", isolation.Probe(IsolationConfig(cfg, nil)))
		// A worker without an orchestrator URL or a token cannot run: the
		// packaged file, as shipped, is such a template.
		if err := cfg.Require(); err != nil {
			fmt.Fprintf(stderr, "simpletuner-workerd: configuration error: the worker cannot run:\n%v\n", err)
			return ExitConfig
		}
		return ExitOK
	}
	log, level := daemon.NewLogger(cfg.Log, os.Stderr)
	if opts.DetectGPUs {
		return detectGPUs(cfg, log, stdout, stderr)
	}
	if err := cfg.Require(); err != nil {
		fmt.Fprintf(stderr, "simpletuner-workerd: configuration error:\n%v\n", err)
		return ExitConfig
	}
	if err := DropSupplementaryGroups(log); err != nil {
		fmt.Fprintf(stderr, "simpletuner-workerd: %v\n", err)
		return ExitConfig
	}
	app, err := New(cfg, args, getenv, log, level)
	if err != nil {
		fmt.Fprintf(stderr, "simpletuner-workerd: configuration error:\n%v\n", err)
		return ExitConfig
	}
	defer app.Close()
	err = daemon.Run(context.Background(), app, daemon.RunOptions{Logger: log, StopTimeout: StopTimeout(cfg)})
	switch {
	case err == nil:
		return ExitOK
	case errors.Is(err, worker.ErrAuthRejected):
		fmt.Fprintln(stderr, "simpletuner-workerd:", worker.ErrAuthRejected)
		return ExitAuth
	case errors.Is(err, worker.ErrMisconfigured):
		fmt.Fprintln(stderr, "simpletuner-workerd:", err)
		return ExitConfig
	case errors.Is(err, worker.ErrNotAnOrchestrator), errors.Is(err, worker.ErrRedirected), errors.Is(err, worker.ErrClientCertificate),
		errors.Is(err, worker.ErrRegistrationRefused), errors.Is(err, worker.ErrWrongScheme):
		fmt.Fprintln(stderr, "simpletuner-workerd: configuration error:", err)
		return ExitConfig
	default:
		fmt.Fprintln(stderr, "simpletuner-workerd:", err)
		return ExitFailed
	}
}

// StopTimeout bounds a stop: the job's grace period (the orchestrator may
// send its own, 30 s by default), then the final report and disconnect.
// The unit's TimeoutStopSec= is longer.
func StopTimeout(cfg *config.Worker) time.Duration {
	return max(90*time.Second, cfg.Job.CancelGrace.Duration+40*time.Second)
}

func detectGPUs(cfg *config.Worker, log *slog.Logger, stdout, stderr io.Writer) int {
	gpus := gpuSource(cfg.GPU, log)
	defer gpus.Close()
	inv, err := gpus.Inventory()
	if err != nil {
		fmt.Fprintln(stderr, "simpletuner-workerd: detecting GPUs:", err)
		return ExitFailed
	}
	out, _ := json.MarshalIndent(struct {
		gpu.Inventory
		GPUInfo any `json:"gpu_info"`
	}{inv, inv.GPUInfo()}, "", "  ")
	fmt.Fprintln(stdout, string(out))
	return ExitOK
}

// gpuSource picks the GPU backend: nvml (zero GPUs without a driver) or none.
func gpuSource(g config.GPUConfig, log *slog.Logger) gpu.Source {
	switch g.Backend {
	case "none":
		return gpu.None()
	case "static":
		devs := make([]gpu.Device, len(g.Devices))
		for i, d := range g.Devices {
			devs[i] = gpu.Device{GPUDevice: protocol.GPUDevice{UUID: d.UUID, Name: d.Name, MemoryMiB: uint64(d.MemoryGB * 1024)}, DeviceNode: d.DeviceNode}
		}
		return gpu.NewStatic(g.Vendor, devs)
	}
	return gpu.NewNVML(log)
}
