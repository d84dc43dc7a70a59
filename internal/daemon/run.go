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
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"
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

	began := time.Now()
	ready, err := start(ctx, runCtx, cancel, app, n, log, sigs)
	if !ready {
		return err
	}
	status := app.Status()
	n.send("READY=1\nSTATUS=" + oneLine(status))
	log.Info("ready", "startup", time.Since(began).Round(time.Millisecond).String(), "status", status)
	return serve(ctx, app, n, log, sigs, stopTimeout)
}
