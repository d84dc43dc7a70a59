// Package orchestratord assembles simpletuner-orchestratord: it loads the
// configuration, opens the store, builds the orchestrator and its listeners,
// and hands the whole to daemon.Run as a daemon.App. It also runs the
// "token" and "vacuum" subcommands. cmd/simpletuner-orchestratord only calls Main.
package orchestratord

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/simpletuner/simpletuner-orchestration/internal/config"
	"github.com/simpletuner/simpletuner-orchestration/internal/daemon"
	"github.com/simpletuner/simpletuner-orchestration/internal/version"
)

// Exit statuses of simpletuner-orchestratord.
const (
	ExitOK     = 0
	ExitFailed = 1 // a configuration error, a failed start or serve
	ExitUsage  = 2 // an unknown subcommand or flag
)

// usage is what --help prints.
func usage() string {
	return `Usage:
  simpletuner-orchestratord [flags]                  serve the API, the scheduler and the dashboard
  simpletuner-orchestratord [--config FILE] token create|list|revoke ...
                                                     manage admin tokens ("token --help" says more)
  simpletuner-orchestratord [--config FILE] vacuum   give the SQLite file's free space back to the
                                                     filesystem (the orchestrator must be stopped)

Flags:
` + config.OrchestratorFlagHelp() + `
See simpletuner-orchestratord(8) and simpletuner-orchestratord.toml(5).
`
}

// Main runs the program with args (without the program name) and returns its
// exit status.
func Main(args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	cfg, opts, err := config.LoadOrchestrator(args, getenv)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(stdout, usage())
		return ExitOK
	}
	if opts.Version {
		fmt.Fprintln(stdout, "simpletuner-orchestratord", version.Version)
		return ExitOK
	}
	command, cmdArgs := "", []string(nil)
	if len(opts.Args) > 0 {
		command, cmdArgs = opts.Args[0], opts.Args[1:]
	}
	if _, ok := errors.AsType[*config.UsageError](err); !ok {
		if cerr := checkCommand(command, cmdArgs); cerr != nil {
			err = cerr // before a configuration error: nothing is read for a bad command line
		}
	}
	if _, ok := errors.AsType[*config.UsageError](err); ok {
		fmt.Fprintf(stderr, "simpletuner-orchestratord: %v\n", err)
		return ExitUsage
	}
	if command == "token" && wantsHelp(cmdArgs) {
		fmt.Fprintln(stdout, tokenUsage) // nothing is read or opened for help
		return ExitOK
	}
	if err != nil {
		fmt.Fprintf(stderr, "simpletuner-orchestratord: configuration error:\n%v\n", err)
		return ExitFailed
	}
	if opts.CheckConfig {
		fmt.Fprint(stdout, cfg.Redacted())
		return ExitOK
	}
	log, level := daemon.NewLogger(cfg.Log, os.Stderr)
	ctx := context.Background()
	switch command {
	case "vacuum":
		if err := VacuumCommand(ctx, cfg, stdout); err != nil {
			fmt.Fprintf(stderr, "simpletuner-orchestratord: vacuum: %v\n", err)
			return ExitFailed
		}
		return ExitOK
	case "token":
		if err := TokenCommand(ctx, cfg, opts.ConfigPath, cmdArgs, stdout, stderr, log); err != nil {
			fmt.Fprintf(stderr, "simpletuner-orchestratord: %v\n", err)
			return ExitFailed
		}
		return ExitOK
	}
	tuneGC(getenv)
	app := New(cfg, args, getenv, log, level)
	if err := daemon.Run(ctx, app, daemon.RunOptions{Logger: log}); err != nil {
		log.Error("exiting", "err", err)
		return ExitFailed
	}
	return ExitOK
}

// checkCommand refuses, as a *config.UsageError, a command line that names an
// unknown command or gives one the wrong arguments; nothing is read for it.
func checkCommand(command string, args []string) error {
	switch command {
	case "":
		return nil
	case "vacuum":
		if len(args) > 0 {
			return &config.UsageError{Err: errors.New("vacuum takes no argument; usage: simpletuner-orchestratord [--config FILE] vacuum")}
		}
		return nil
	case "token":
		if wantsHelp(args) {
			return nil
		}
		if len(args) == 0 {
			return &config.UsageError{Err: fmt.Errorf("token needs a command: create, list or revoke\n%s", tokenUsage)}
		}
		_, err := parseTokenArgs(args)
		return err
	}
	return &config.UsageError{Err: fmt.Errorf("unknown command %q (token create|list|revoke, or vacuum; see --help)", command)}
}
