package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"syscall"

	"github.com/simpletuner/simpletuner-orchestration/internal/version"
)

// start runs app.Start, answering signals meanwhile: a stop signal (or ctx
// ending) cancels runCtx, which Start sees, and SIGHUP is ignored until the
// daemon is ready. ready is false when a stop came first; err is Start's
// failure.
func start(ctx, runCtx context.Context, cancel context.CancelFunc, app App, n *notifier, log *slog.Logger, sigs <-chan os.Signal) (ready bool, err error) {
	n.send("STATUS=Starting")
	log.Info("starting", "version", version.Version)
	// Start runs in a goroutine so a stop signal during a long migration still works.
	startDone := make(chan error, 1)
	go func() { startDone <- app.Start(runCtx) }()
	stoppedEarly := false
	parentDone := ctx.Done()
	for {
		select {
		case err := <-startDone:
			// runCtx ends with ctx: a Start that saw it may answer before
			// this loop saw ctx end. That is a stop, not a failure.
			if ctx.Err() != nil {
				stoppedEarly = true
			}
			if err != nil && !stoppedEarly {
				n.send("STATUS=Start failed: " + oneLine(err.Error()))
				log.Error("start failed", "err", err)
				return false, fmt.Errorf("start: %w", err)
			}
			if stoppedEarly {
				// Start saw its context cancelled; we never became ready.
				log.Info("stopped before becoming ready")
				return false, nil
			}
			return true, nil
		case sig := <-sigs:
			if sig == syscall.SIGHUP {
				log.Warn("ignoring SIGHUP during startup")
				continue
			}
			log.Info("stop requested during startup", "signal", sig.String())
			if !stoppedEarly {
				stoppedEarly = true
				n.send("STOPPING=1\nSTATUS=Stopping during startup")
				cancel()
			}
		case <-parentDone:
			parentDone = nil
			stoppedEarly = true
			cancel()
		}
	}
}
