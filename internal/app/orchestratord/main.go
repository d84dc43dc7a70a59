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

	"github.com/simpletuner/simpletuner-orchestration/daemon"
	"github.com/simpletuner/simpletuner-orchestration/internal/config"
	"github.com/simpletuner/simpletuner-orchestration/internal/version"
)

// Exit statuses of simpletuner-orchestratord.
const (
	ExitOK     = 0
	ExitFailed = 1 // a configuration error, a failed start or serve
	ExitUsage  = 2 // an unknown subcommand or flag
)

// Main runs the program with args (without the program name) and returns its
// exit status.
func Main(args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	cfg, opts, err := config.LoadOrchestrator(args, getenv)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprintln(stdout, err)
		return ExitOK
	}
	if opts.Version {
		fmt.Fprintln(stdout, "simpletuner-orchestratord", version.Version)
		return ExitOK
	}
	if len(opts.Args) > 0 && opts.Args[0] == "token" && wantsHelp(opts.Args[1:]) {
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
	if len(opts.Args) > 0 && opts.Args[0] == "vacuum" {
		if len(opts.Args) > 1 {
			fmt.Fprintln(stderr, "simpletuner-orchestratord: usage: simpletuner-orchestratord [--config FILE] vacuum")
			return ExitUsage
		}
		if err := VacuumCommand(ctx, cfg, stdout); err != nil {
			fmt.Fprintf(stderr, "simpletuner-orchestratord: vacuum: %v\n", err)
			return ExitFailed
		}
		return ExitOK
	}
	if len(opts.Args) > 0 {
		if opts.Args[0] != "token" {
			fmt.Fprintf(stderr, "simpletuner-orchestratord: unknown command %q (did you mean: token create|list|revoke, or vacuum?)\n", opts.Args[0])
			return ExitUsage
		}
		if err := TokenCommand(ctx, cfg, opts.ConfigPath, opts.Args[1:], stdout, stderr, log); err != nil {
			fmt.Fprintf(stderr, "simpletuner-orchestratord: %v\n", err)
			return ExitFailed
		}
		return ExitOK
	}
	app := New(cfg, args, getenv, log, level)
	if err := daemon.Run(ctx, app, daemon.RunOptions{Logger: log}); err != nil {
		log.Error("exiting", "err", err)
		return ExitFailed
	}
	return ExitOK
}
