// Package orchestratord wires simpletuner-orchestratord together: config →
// store → orchestrator → listeners, as a daemon.App that daemon.Run drives.
package orchestratord

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"reflect"
	"strings"
	"sync"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/daemon"
	"github.com/simpletuner/simpletuner-orchestration/internal/config"
	"github.com/simpletuner/simpletuner-orchestration/internal/dashboard"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator"
	"github.com/simpletuner/simpletuner-orchestration/internal/store"
	"github.com/simpletuner/simpletuner-orchestration/internal/store/postgres"
	"github.com/simpletuner/simpletuner-orchestration/internal/store/sqlite"
	"github.com/simpletuner/simpletuner-orchestration/internal/version"
)

// OpenStore opens the configured database: "" → SQLite under state_dir,
// sqlite:///path → that file, postgres://… → PostgreSQL. Migrations run here.
func OpenStore(ctx context.Context, cfg *config.Orchestrator, log *slog.Logger) (store.Store, string, error) {
	url := cfg.Database.URL.Value()
	switch {
	case url == "":
		path := cfg.Paths.StateDir + "/orchestrator.db"
		st, err := sqlite.Open(ctx, path, log)
		return st, "sqlite " + path, err
	case strings.HasPrefix(url, "sqlite://"):
		path := strings.TrimPrefix(url, "sqlite://")
		st, err := sqlite.Open(ctx, path, log)
		return st, "sqlite " + path, err
	default:
		st, err := postgres.Open(ctx, url, log)
		return st, "postgresql", err
	}
}

// Options maps the config onto the orchestrator's settings.
func Options(cfg *config.Orchestrator) orchestrator.Options {
	o := orchestrator.DefaultOptions()
	if cfg.Server.InstanceID != "" {
		o.InstanceID = cfg.Server.InstanceID
	} else {
		o.InstanceID = fmt.Sprintf("%s:%d", o.InstanceID, os.Getpid())
	}
	o.MaxBodyBytes = cfg.Server.MaxBodyBytes
	o.AdminGroup = cfg.Server.AdminGroup
	o.ConfigsDir = cfg.Paths.ConfigsDir
	w := cfg.Workers
	o.HeartbeatInterval, o.HeartbeatTimeout = w.HeartbeatInterval.Duration, w.HeartbeatTimeout.Duration
	o.HealthCheckInterval, o.StartupGrace = w.HealthCheckInterval.Duration, w.StartupGrace.Duration
	o.AckTimeout, o.EphemeralCleanupAfter = w.AckTimeout.Duration, w.EphemeralCleanupAfter.Duration
	o.PingInterval = w.PingInterval.Duration
	j := cfg.Jobs
	o.MaxRetries, o.CancelGrace, o.CancelReportTimeout = j.MaxRetries, j.CancelGrace.Duration, j.CancelReportTimeout.Duration
	o.LogLimitBytes, o.SchedulerInterval = j.LogLimitBytes, j.SchedulerInterval.Duration
	o.AuthFailuresPerMinute = cfg.Auth.FailuresPerMinute
	return o
}

// App is the orchestrator daemon.
type App struct {
	args     []string
	getenv   func(string) string
	log      *slog.Logger
	level    *slog.LevelVar
	mu       sync.Mutex
	cfg      *config.Orchestrator
	store    store.Store
	srv      *orchestrator.Server
	servers  []*http.Server
	serveErr chan error
	started  chan struct{}
	// loopCtx ends the background loops after the HTTP servers have stopped.
	loopCancel context.CancelFunc
	loopsDone  chan struct{}
}

// New returns an App for a loaded config; args and getenv are kept for SIGHUP
// reloads. level controls the logger's verbosity live.
func New(cfg *config.Orchestrator, args []string, getenv func(string) string, log *slog.Logger, level *slog.LevelVar) *App {
	return &App{cfg: cfg, args: args, getenv: getenv, log: log, level: level, started: make(chan struct{})}
}

// Server exposes the orchestrator (tests).
func (a *App) Server() *orchestrator.Server { return a.srv }

// Start binds the listeners, opens and migrates the store, and starts the loops.
func (a *App) Start(ctx context.Context) error {
	cfg := a.cfg
	specs := []daemon.ListenSpec{{Name: "api", Addrs: cfg.Server.Listen}}
	if cfg.Server.AdminSocket != "" {
		specs = append(specs, daemon.ListenSpec{Name: "admin", Addrs: []string{"unix:" + cfg.Server.AdminSocket}, UnixMode: 0o660, UnixGroup: cfg.Server.AdminGroup})
	}
	if cfg.Metrics.Listen != "" {
		specs = append(specs, daemon.ListenSpec{Name: "metrics", Addrs: []string{cfg.Metrics.Listen}})
	}
	listeners, err := daemon.Listen(specs)
	if err != nil {
		return err
	}
	st, desc, err := OpenStore(ctx, cfg, a.log)
	if err != nil {
		closeAll(listeners)
		return fmt.Errorf("opening the database: %w", err)
	}
	a.store = st
	a.log.Info("database ready", "store", desc)
	a.srv = orchestrator.New(st, Options(cfg), a.log)
	a.srv.SetAdminSocketPath(cfg.Server.AdminSocket)

	tlsConf, err := tlsConfig(cfg)
	if err != nil {
		closeAll(listeners)
		_ = st.Close()
		return err
	}
	api := a.srv.Handler()
	// The web dashboard lives under /ui/ on the API listeners (not the admin
	// socket) and acts only through api, called in process.
	dash, err := dashboard.New(dashboard.Options{API: api, Sessions: st, Version: version.Version, Log: a.log})
	if err != nil {
		closeAll(listeners)
		_ = st.Close()
		return err
	}
	a.serveErr = make(chan error, 8)
	serve := func(l net.Listener, h http.Handler, connCtx func(context.Context, net.Conn) context.Context, tc *tls.Config) {
		hs := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 120 * time.Second,
			ConnContext: connCtx, ErrorLog: slog.NewLogLogger(a.log.Handler(), slog.LevelDebug)}
		if tc != nil {
			l = tls.NewListener(l, tc)
		}
		a.servers = append(a.servers, hs)
		a.log.Info("listening", "addr", l.Addr().String(), "tls", tc != nil)
		go func() {
			if err := hs.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
				a.serveErr <- err
			}
		}()
	}
	for _, l := range listeners["api"] {
		serve(l, dash.Mount(api), nil, tlsConf)
	}
	for _, l := range listeners["admin"] {
		serve(l, api, a.srv.AdminConnContext, nil)
	}
	for _, l := range listeners["metrics"] {
		serve(l, a.srv.MetricsHandler(), nil, nil)
	}
	loopCtx, cancel := context.WithCancel(context.Background())
	a.loopCancel, a.loopsDone = cancel, make(chan struct{})
	go func() { a.srv.Run(loopCtx); close(a.loopsDone) }()
	close(a.started)
	return nil
}

func closeAll(ls map[string][]net.Listener) {
	for _, l := range ls {
		for _, x := range l {
			_ = x.Close()
		}
	}
}

func tlsConfig(cfg *config.Orchestrator) (*tls.Config, error) {
	if cfg.TLS.CertFile == "" {
		return nil, nil
	}
	cert, err := tls.LoadX509KeyPair(cfg.TLS.CertFile, cfg.TLS.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("tls: loading cert_file %s / key_file %s: %w", cfg.TLS.CertFile, cfg.TLS.KeyFile, err)
	}
	tc := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	if cfg.TLS.ClientCAFile != "" {
		pem, err := os.ReadFile(cfg.TLS.ClientCAFile)
		if err != nil {
			return nil, fmt.Errorf("tls: client_ca_file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("tls: client_ca_file %s holds no PEM certificate", cfg.TLS.ClientCAFile)
		}
		tc.ClientCAs, tc.ClientAuth = pool, tls.RequireAndVerifyClientCert
	}
	return tc, nil
}

// Serve blocks until ctx ends, then stops in order: refuse new work (readyz
// 503, streams closed so workers reconnect elsewhere), drain HTTP, stop loops,
// close the store.
func (a *App) Serve(ctx context.Context) error {
	var err error
	select {
	case <-ctx.Done():
	case err = <-a.serveErr:
		a.log.Error("listener failed", "err", err)
	}
	a.log.Info("shutting down: closing worker streams")
	a.srv.BeginShutdown()
	shutCtx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, hs := range a.servers {
		_ = hs.Shutdown(shutCtx)
	}
	a.log.Info("shutting down: HTTP servers stopped; stopping loops")
	a.loopCancel()
	<-a.loopsDone
	if cerr := a.store.Close(); cerr != nil {
		a.log.Warn("closing the database", "err", cerr)
	}
	a.log.Info("shutdown complete")
	return err
}

// Healthy gates the systemd watchdog.
func (a *App) Healthy() error { return a.srv.Healthy() }

// Status is the STATUS= line.
func (a *App) Status() string {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	return a.srv.Status(ctx)
}

// Reload re-reads the configuration (SIGHUP). Timers, limits and the log level
// apply at once; listeners, TLS and the database need a restart and are only
// reported. An invalid file keeps the running config.
func (a *App) Reload() error {
	cfg, _, err := config.LoadOrchestrator(a.args, a.getenv)
	if err != nil {
		return err
	}
	a.mu.Lock()
	old := a.cfg
	a.cfg = cfg
	a.mu.Unlock()
	for _, c := range []struct {
		name     string
		old, new any
	}{
		{"server.listen", old.Server.Listen, cfg.Server.Listen},
		{"server.admin_socket", old.Server.AdminSocket, cfg.Server.AdminSocket},
		{"tls", old.TLS, cfg.TLS},
		{"database", old.Database, cfg.Database},
		{"paths.state_dir", old.Paths.StateDir, cfg.Paths.StateDir},
		{"metrics.listen", old.Metrics.Listen, cfg.Metrics.Listen},
	} {
		if !reflect.DeepEqual(c.old, c.new) {
			a.log.Warn("config change needs a restart to take effect", "key", c.name)
		}
	}
	if a.level != nil {
		a.level.Set(ParseLevel(cfg.Log.Level))
	}
	a.srv.SetOptions(Options(cfg))
	a.log.Info("configuration reloaded")
	return nil
}

// ParseLevel maps a config level name to slog's.
func ParseLevel(s string) slog.Level {
	switch strings.ToLower(s) {
	case "debug":
		return slog.LevelDebug
	case "warn":
		return slog.LevelWarn
	case "error":
		return slog.LevelError
	}
	return slog.LevelInfo
}
