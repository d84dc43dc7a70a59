// Command simpletuner-orchestratord is the central daemon of a SimpleTuner
// worker fleet: HTTP API, job queue and dispatch. See simpletuner-orchestratord(8).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"

	"github.com/simpletuner/simpletuner-orchestration/daemon"
	"github.com/simpletuner/simpletuner-orchestration/internal/config"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestratord"
	"github.com/simpletuner/simpletuner-orchestration/internal/version"
)

func main() {
	args := os.Args[1:]
	cfg, opts, err := config.LoadOrchestrator(args, os.Getenv)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Println(err)
		return
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "simpletuner-orchestratord: configuration error:\n%v\n", err)
		os.Exit(1)
	}
	switch {
	case opts.Version:
		fmt.Println("simpletuner-orchestratord", version.Version)
		return
	case opts.CheckConfig:
		fmt.Print(cfg.Redacted())
		return
	}
	log, level := orchestratord.NewLogger(cfg.Log.Level, cfg.Log.Format)
	ctx := context.Background()
	if len(opts.Args) > 0 {
		if opts.Args[0] != "token" {
			fmt.Fprintf(os.Stderr, "simpletuner-orchestratord: unknown command %q (did you mean: token create|list|revoke?)\n", opts.Args[0])
			os.Exit(2)
		}
		if err := orchestratord.TokenCommand(ctx, cfg, opts.Args[1:], os.Stdout, log); err != nil {
			fmt.Fprintf(os.Stderr, "simpletuner-orchestratord: %v\n", err)
			os.Exit(1)
		}
		return
	}
	app := orchestratord.New(cfg, args, os.Getenv, log, level)
	if err := daemon.Run(ctx, app, daemon.RunOptions{Logger: log}); err != nil {
		log.Error("exiting", "err", err)
		os.Exit(1)
	}
}
