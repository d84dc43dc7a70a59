// Package daemon is the systemd-native lifecycle shared by simpletuner-orchestratord and
// simpletuner-workerd: listeners from socket activation (by name) or configured
// addresses, sd_notify READY/STATUS/RELOADING/STOPPING, a watchdog that pings only while
// the daemon's own loops are healthy, and SIGTERM/SIGINT/SIGHUP handling.
//
// Outside systemd (no NOTIFY_SOCKET, no WATCHDOG_USEC, no LISTEN_FDS) everything degrades
// to a plain foreground process.
package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	sddaemon "github.com/coreos/go-systemd/v22/daemon"
)

// App is one daemon's behaviour; Run drives it.
type App interface {
	// Start binds listeners, runs migrations and loads state. READY=1 is sent only
	// after it returns nil. ctx is cancelled when a stop signal arrives during start.
	Start(ctx context.Context) error
	// Serve blocks until ctx is cancelled (then shuts down in order and returns nil),
	// until the app finishes by itself (nil, e.g. an ephemeral worker after its job),
	// or until it fails (error).
	Serve(ctx context.Context) error
	// Healthy returns nil while the real loops make progress; it gates WATCHDOG=1.
	Healthy() error
	// Status is one human-readable line for STATUS=. It may be called at any time
	// after Start returned, from another goroutine.
	Status() string
	// Reload re-reads the configuration on SIGHUP. An error means the old
	// configuration stays in effect.
	Reload() error
}

// Drainer is implemented by apps that can finish their current work before stopping
// (the worker). The first SIGTERM/SIGINT calls Drain instead of cancelling Serve; the
// second one cancels. Drain must not block.
type Drainer interface{ Drain() }

// RunOptions tune Run.
type RunOptions struct {
	Logger *slog.Logger
	// StopTimeout bounds how long Serve may take to return after its context is
	// cancelled; 0 means 90s. Keep it below the unit's TimeoutStopSec=.
	StopTimeout time.Duration
}

// ErrStopTimeout is returned by Run when Serve did not return within StopTimeout.
var ErrStopTimeout = errors.New("daemon: shutdown deadline exceeded")

// statusEvery is how often Status() is polled; a var so tests can shorten it.
var statusEvery = 2 * time.Second

// Run starts app, announces readiness, serves until stopped and shuts down under a
// deadline. It returns nil after a clean stop (signal, ctx, or the app finishing by
// itself) and an error when Start or Serve failed or the shutdown deadline passed.
func Run(ctx context.Context, app App, opt RunOptions) error {
	log := opt.Logger
	if log == nil {
		log = slog.Default()
	}
	stopTimeout := opt.StopTimeout
	if stopTimeout <= 0 {
		stopTimeout = 90 * time.Second
	}

	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	defer signal.Stop(sigs)

	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()

	n := &notifier{log: log}
	n.send("STATUS=Starting")
	log.Info("starting")
	began := time.Now()

	// Start runs in a goroutine so a stop signal during a long migration still works.
	startDone := make(chan error, 1)
	go func() { startDone <- app.Start(runCtx) }()
	stoppedEarly := false
	parentDone := ctx.Done()
	for started := false; !started; {
		select {
		case err := <-startDone:
			if err != nil && !stoppedEarly {
				n.send("STATUS=Start failed: " + oneLine(err.Error()))
				log.Error("start failed", "err", err)
				return fmt.Errorf("start: %w", err)
			}
			started = true
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
	if stoppedEarly {
		// Start saw its context cancelled; we never became ready, so nothing to serve.
		log.Info("stopped before becoming ready")
		return nil
	}

	status := app.Status()
	n.send("READY=1\nSTATUS=" + oneLine(status))
	log.Info("ready", "startup", time.Since(began).Round(time.Millisecond).String(), "status", status)

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
	parentDone = ctx.Done()
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
// lines are not resent every poll.
type notifier struct {
	log        *slog.Logger
	mu         sync.Mutex
	lastStatus string
	warned     bool
}

func (n *notifier) status(s string) {
	s = oneLine(s)
	n.mu.Lock()
	changed := s != n.lastStatus
	n.mu.Unlock()
	if changed {
		n.send("STATUS=" + s)
	}
}

func (n *notifier) send(state string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, line := range strings.Split(state, "\n") {
		if s, ok := strings.CutPrefix(line, "STATUS="); ok {
			n.lastStatus = s
		}
	}
	if err := Notify(state); err != nil && !n.warned {
		// Once is enough: a broken notify socket would otherwise flood the log.
		n.log.Warn("sd_notify failed", "err", err)
		n.warned = true
	}
}

// Notify sends state to the service manager (sd_notify). Without NOTIFY_SOCKET it does
// nothing and returns nil.
func Notify(state string) error {
	_, err := sddaemon.SdNotify(false, state)
	return err
}

// oneLine keeps a STATUS= value on one line; a newline would start a new assignment.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}
