package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"syscall"
	"time"

	sddaemon "github.com/coreos/go-systemd/v22/daemon"
)

// serve runs app.Serve until it returns or a stop arrives: it pings the
// watchdog while the app is healthy, keeps STATUS= current, reloads on SIGHUP,
// drains on the first SIGTERM of an app that can drain, and bounds the
// shutdown by stopTimeout.
func serve(ctx context.Context, app App, n *notifier, log *slog.Logger, sigs <-chan os.Signal, stopTimeout time.Duration) error {
	serveCtx, cancelServe := context.WithCancel(ctx)
	defer cancelServe()
	serveDone := make(chan error, 1)
	go func() { serveDone <- app.Serve(serveCtx) }()

	wdStop := make(chan struct{})
	var wdWG sync.WaitGroup
	defer func() { close(wdStop); wdWG.Wait() }()
	if interval, err := sddaemon.SdWatchdogEnabled(false); err != nil {
		log.Warn("ignoring malformed watchdog settings", "err", err)
	} else if interval > 0 {
		wdWG.Add(1)
		go func() { defer wdWG.Done(); watchdog(app, n, log, interval/2, wdStop) }()
		log.Info("watchdog enabled", "interval", interval.String())
	}

	statusTick := time.NewTicker(statusEvery)
	defer statusTick.Stop()

	var (
		draining  bool
		cancelled bool
		deadline  <-chan time.Time
		stopBegan time.Time
	)
	parentDone := ctx.Done()
	stop := func(reason string) {
		if cancelled {
			log.Warn("already stopping; waiting for shutdown", "reason", reason)
			return
		}
		cancelled = true
		stopBegan = time.Now()
		if !draining {
			n.send("STOPPING=1")
		}
		n.send("STATUS=Stopping (" + reason + ")")
		log.Info("stopping", "reason", reason, "deadline", stopTimeout.String())
		cancelServe()
		deadline = time.After(stopTimeout)
	}

	for {
		select {
		case err := <-serveDone:
			switch {
			case err != nil:
				n.send("STATUS=Failed: " + oneLine(err.Error()))
				log.Error("serve failed", "err", err)
				return fmt.Errorf("serve: %w", err)
			case cancelled:
				n.send("STATUS=Stopped")
				log.Info("stopped", "shutdown", time.Since(stopBegan).Round(time.Millisecond).String())
			default:
				if !draining {
					n.send("STOPPING=1")
				}
				n.send("STATUS=Finished")
				log.Info("finished")
			}
			return nil

		case sig := <-sigs:
			switch {
			case sig == syscall.SIGHUP:
				reload(app, n, log)
			case !draining && !cancelled && isDrainer(app):
				draining = true
				n.send("STOPPING=1\nSTATUS=Draining: finishing current work; signal again to stop now")
				log.Info("draining; send the signal again to stop now", "signal", sig.String())
				app.(Drainer).Drain()
			default:
				stop(sig.String())
			}

		case <-parentDone:
			parentDone = nil
			stop("context cancelled")

		case <-deadline:
			n.send("STATUS=Shutdown deadline exceeded")
			log.Error("serve did not return before the shutdown deadline", "deadline", stopTimeout.String())
			return ErrStopTimeout

		case <-statusTick.C:
			if !cancelled {
				n.status(app.Status())
			}
		}
	}
}

func isDrainer(app App) bool { _, ok := app.(Drainer); return ok }

// reload brackets App.Reload with RELOADING=1 … READY=1 whatever its outcome, because
// systemd waits for READY=1 to end the reload either way.
func reload(app App, n *notifier, log *slog.Logger) {
	log.Info("reloading configuration")
	n.send("RELOADING=1\n" + sddaemon.SdNotifyMonotonicUsec())
	if err := app.Reload(); err != nil {
		log.Error("reload failed; keeping the previous configuration", "err", err)
		n.send("READY=1\nSTATUS=Reload failed, previous configuration kept: " + oneLine(err.Error()))
		return
	}
	status := app.Status()
	n.send("READY=1\nSTATUS=" + oneLine(status))
	log.Info("reloaded", "status", status)
}

// watchdog pings every period while app.Healthy() is nil. Withholding pings is the
// point: systemd then restarts a daemon whose loops are stuck even if the process lives.
func watchdog(app App, n *notifier, log *slog.Logger, period time.Duration, stop <-chan struct{}) {
	t := time.NewTicker(period)
	defer t.Stop()
	withholding := false
	for {
		if err := app.Healthy(); err != nil {
			if !withholding {
				log.Warn("unhealthy; withholding watchdog pings", "err", err)
				withholding = true
			}
		} else {
			if withholding {
				log.Info("healthy again; resuming watchdog pings")
				withholding = false
			}
			n.send(sddaemon.SdNotifyWatchdog)
		}
		select {
		case <-stop:
			return
		case <-t.C:
		}
	}
}

// notifier serialises sd_notify messages and remembers the last STATUS= so unchanged
