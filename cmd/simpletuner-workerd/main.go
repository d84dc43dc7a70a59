// Command simpletuner-workerd runs SimpleTuner training jobs on a GPU machine for
// simpletuner-orchestratord. See simpletuner-workerd(8) and workerd.toml(5).
//
// Exit status: 0 after a clean stop (signal, drain, an ephemeral worker with no more
// jobs, --check-config of a valid file), 1 for a configuration or start-up error,
// 2 when the orchestrator rejected the worker token (401), 3 for any other failure.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/daemon"
	"github.com/simpletuner/simpletuner-orchestration/internal/config"
	"github.com/simpletuner/simpletuner-orchestration/internal/gpu"
	"github.com/simpletuner/simpletuner-orchestration/internal/version"
	"github.com/simpletuner/simpletuner-orchestration/internal/worker"
)

const (
	exitOK     = 0
	exitConfig = 1
	exitAuth   = 2
	exitFailed = 3
)

func main() {
	// workerd re-executes itself as each job's supervisor (see worker.Supervise).
	if len(os.Args) > 1 && os.Args[1] == worker.SuperviseArg {
		os.Exit(worker.Supervise(os.Args[2:]))
	}
	os.Exit(run())
}

func run() int {
	cfg, opts, err := config.LoadWorker(os.Args[1:], os.Getenv)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Println(err)
		return exitOK
	}
	if opts.Version {
		fmt.Println("simpletuner-workerd", version.Version)
		return exitOK
	}
	if opts.CheckConfig {
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return exitConfig
		}
		fmt.Print(cfg.Redacted())
		return exitOK
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return exitConfig
	}

	log := daemon.NewLogger(cfg.Log.Level, cfg.Log.Format, os.Stderr)
	if opts.DetectGPUs {
		gpus := gpuSource(cfg.GPU.Backend, log)
		defer gpus.Close()
		inv, err := gpus.Inventory()
		if err != nil {
			fmt.Fprintln(os.Stderr, "simpletuner-workerd: detecting GPUs:", err)
			return exitFailed
		}
		out, _ := json.MarshalIndent(struct {
			gpu.Inventory
			GPUInfo any `json:"gpu_info"`
		}{inv, inv.GPUInfo()}, "", "  ")
		fmt.Println(string(out))
		return exitOK
	}
	if err := cfg.Require(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return exitConfig
	}
	gpus := gpuSource(cfg.GPU.Backend, log)
	defer gpus.Close()
	if exe, err := os.Executable(); err == nil {
		worker.Supervisor = []string{exe, worker.SuperviseArg}
	} else {
		log.Warn("cannot find own executable; jobs run without a supervisor", "err", err)
	}

	w, err := worker.New(worker.Options{
		URL:                cfg.Orchestrator.URL,
		Token:              cfg.Orchestrator.Token.Value(),
		CAFile:             cfg.Orchestrator.CAFile,
		InsecureSkipVerify: cfg.Orchestrator.InsecureSkipVerify,
		Name:               cfg.Worker.Name,
		Persistent:         cfg.Worker.Persistent,
		Labels:             cfg.Worker.Labels,
		StateDir:           cfg.Worker.StateDir,
		Version:            version.Version,
		Command:            cfg.Job.Command,
		WorkDir:            cfg.Job.WorkDir,
		CancelGrace:        cfg.Job.CancelGrace.Duration,
		JobEnv:             cfg.Job.Env,
		LogLimitBytes:      cfg.Job.LogLimitBytes,
		SelfFenceAfter:     cfg.Worker.SelfFenceAfter.Duration,
		ReconnectMax:       cfg.Worker.ReconnectMax.Duration,
		GPU:                gpus,
		Logger:             log,
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "simpletuner-workerd:", err)
		return exitConfig
	}
	// Stopping waits for the job's grace period (the orchestrator may send its own,
	// 30s by default), then the final report and disconnect (5s each).
	stop := max(90*time.Second, cfg.Job.CancelGrace.Duration+40*time.Second)
	err = daemon.Run(context.Background(), w, daemon.RunOptions{Logger: log, StopTimeout: stop})
	switch {
	case err == nil:
		return exitOK
	case errors.Is(err, worker.ErrAuthRejected):
		fmt.Fprintln(os.Stderr, "simpletuner-workerd:", worker.ErrAuthRejected)
		return exitAuth
	default:
		fmt.Fprintln(os.Stderr, "simpletuner-workerd:", err)
		return exitFailed
	}
}

// gpuSource picks the GPU backend: nvml (zero GPUs without a driver) or none.
func gpuSource(backend string, log *slog.Logger) gpu.Source {
	if backend == "none" {
		return gpu.None()
	}
	return gpu.NewNVML(log)
}
