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
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/artifacts"
	"github.com/simpletuner/simpletuner-orchestration/internal/config"
	"github.com/simpletuner/simpletuner-orchestration/internal/daemon"
	"github.com/simpletuner/simpletuner-orchestration/internal/dashboard"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator"
	"github.com/simpletuner/simpletuner-orchestration/internal/store"
	"github.com/simpletuner/simpletuner-orchestration/internal/store/postgres"
	"github.com/simpletuner/simpletuner-orchestration/internal/store/sqlite"
	"github.com/simpletuner/simpletuner-orchestration/internal/version"
)

// OpenStore opens the configured database: "" → SQLite under state_dir,
// sqlite:///path → that file, postgres://… → PostgreSQL. Migrations run here.
// It also returns a description of the store for messages ("sqlite /path").
func OpenStore(ctx context.Context, cfg *config.Orchestrator, log *slog.Logger) (store.Store, string, error) {
	kind, where := storeLocation(cfg)
	if kind == "sqlite" {
		st, err := sqlite.Open(ctx, where, log)
		return st, "sqlite " + where, err
	}
	st, err := postgres.OpenWith(ctx, where, postgres.Options{Timeout: cfg.Database.Timeout.Duration}, log)
	return st, "postgresql", err
}

// OpenExistingStore opens the configured database like OpenStore, but refuses
// to create one: a command that would write into a new, empty database the
// orchestrator never reads must fail instead, naming the path.
func OpenExistingStore(ctx context.Context, cfg *config.Orchestrator, log *slog.Logger) (store.Store, string, error) {
	if kind, path := storeLocation(cfg); kind == "sqlite" {
		if _, err := os.Stat(path); err != nil {
			return nil, "", fmt.Errorf("no orchestrator database at %s (%v); nothing was created", path, errors.Unwrap(err))
		}
	}
	return OpenStore(ctx, cfg, log)
}

// storeLocation is the kind of the configured store and its file or URL.
func storeLocation(cfg *config.Orchestrator) (kind, where string) {
	url := cfg.Database.URL.Value()
	switch {
	case url == "":
		return "sqlite", cfg.Paths.StateDir + "/orchestrator.db"
	case strings.HasPrefix(url, "sqlite://"):
		return "sqlite", strings.TrimPrefix(url, "sqlite://")
	}
	return "postgres", url
}

// diskPaths names a path on the filesystem of the database and of the
// artifacts, where they are local ("" where not), for the full-disk watcher.
func diskPaths(cfg *config.Orchestrator) (database, arts string) {
	if kind, path := storeLocation(cfg); kind == "sqlite" {
		database = filepath.Dir(path)
	}
	if cfg.Artifacts.Backend != "s3" {
		arts = cfg.ArtifactsDir()
	}
	return database, arts
}

// OpenArtifacts opens the configured artifact storage: a directory
// (created if missing) or an S3 bucket (which must exist). Limits are set
// later from the options, and follow reloads.
func OpenArtifacts(ctx context.Context, cfg *config.Orchestrator) (*artifacts.Store, error) {
	c := cfg.Artifacts
	limits := artifacts.Limits{MaxObjectBytes: c.MaxObjectBytes, MaxJobBytes: c.MaxJobBytes, MaxJobObjects: c.MaxJobObjects,
		ReservePercent: c.ReservePercent}
	if c.Backend == "s3" {
		b, err := artifacts.NewS3(ctx, artifacts.S3Config{Endpoint: c.S3Endpoint, Bucket: c.S3Bucket, Region: c.S3Region,
			Prefix: c.S3Prefix, AccessKey: c.S3AccessKey, SecretKey: c.S3SecretKey.Value(), PartSize: s3PartSize(c.MaxObjectBytes)})
		if err != nil {
			return nil, err
		}
		return artifacts.New(b, limits), nil
	}
	b, err := artifacts.NewLocal(cfg.ArtifactsDir())
	if err != nil {
		return nil, err
	}
	return artifacts.New(b, limits), nil
}

// s3PartSize picks the smallest multipart part (at least 16 MiB, whole MiB)
// that lets an object of max bytes fit in S3's 10,000 parts: the part is
// also what one upload holds in memory.
func s3PartSize(maxObject int64) uint64 {
	const parts, mib = 10000, 1 << 20
	need := (maxObject + parts - 1) / parts
	need = (need + mib - 1) / mib * mib
	return uint64(max(need, artifacts.DefaultPartSize))
}

// artifactsWhere is what of [artifacts] needs a restart to change.
func artifactsWhere(c *config.Orchestrator) any {
	a := c.Artifacts
	return []any{a.Backend, c.ArtifactsDir(), a.S3Endpoint, a.S3Bucket, a.S3Region, a.S3Prefix, a.S3AccessKey, a.S3SecretKey.Value()}
}

// App is the orchestrator daemon.
type App struct {
	args   []string
	getenv func(string) string
	log    *slog.Logger
	level  *slog.LevelVar
	mu     sync.Mutex
	// cfg is the configuration in force; started is the one the daemon
	// started with, which settings that need a restart are compared against.
	cfg      *config.Orchestrator
	started  *config.Orchestrator
	store    store.Store
	srv      *orchestrator.Server
	servers  []*http.Server
	serveErr chan error
	ready    chan struct{}
	// loopCtx ends the background loops after the HTTP servers have stopped.
	loopCancel context.CancelFunc
	loopsDone  chan struct{}
	// dbLock holds an embedded database for this process (see lockDatabase).
	dbLock *os.File
}

// New returns an App for a loaded config; args and getenv are kept for SIGHUP
// reloads. level controls the logger's verbosity live.
func New(cfg *config.Orchestrator, args []string, getenv func(string) string, log *slog.Logger, level *slog.LevelVar) *App {
	return &App{cfg: cfg, started: cfg, args: args, getenv: getenv, log: log, level: level, ready: make(chan struct{})}
}

// Server exposes the orchestrator (tests).
func (a *App) Server() *orchestrator.Server { return a.srv }

// Start binds the listeners, opens and migrates the store, and starts the loops.
func (a *App) Start(ctx context.Context) (err error) {
	cfg := a.cfg
	if kind, path := storeLocation(cfg); kind == "sqlite" {
		if a.dbLock, err = lockDatabase(path); err != nil {
			return err
		}
		defer func() {
			if err != nil {
				a.dbLock.Close()
				a.dbLock = nil
			}
		}()
	}
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
	a.srv = orchestrator.New(st, orchestrator.OptionsFrom(cfg), a.log)
	a.srv.SetAdminSocketPath(cfg.Server.AdminSocket)
	providers, err := newIdentityProviders(cfg, st)
	if err != nil {
		closeAll(listeners)
		_ = st.Close()
		return err
	}
	a.srv.SetSignInProviders(providers.forAPI())
	arts, err := OpenArtifacts(ctx, cfg)
	if err != nil {
		closeAll(listeners)
		_ = st.Close()
		return fmt.Errorf("artifact storage: %w", err)
	}
	a.srv.SetArtifacts(arts)
	a.log.Info("artifact storage ready", "backend", arts.Backend().String())
	a.srv.SetDiskPaths(diskPaths(cfg))

	tlsConf, err := tlsConfig(cfg)
	if err != nil {
		closeAll(listeners)
		_ = st.Close()
		return err
	}
	api := a.srv.Handler()
	// The web dashboard lives under /ui/ on the API listeners (not the admin
	// socket) and acts only through the orchestrator's API, called in process.
	dopt := dashboard.Options{API: a.srv.API(), HTTP: api, Sessions: st, PublicURL: cfg.PublicURL(), Version: version.Version, Log: a.log}
	a.forDashboard(providers, cfg, st, &dopt)
	dash, err := dashboard.New(dopt)
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
		if tlsConf == nil && reachableFromNetwork(l.Addr()) {
			a.log.Warn("the API is served over plain HTTP on an address other machines can reach: worker and admin tokens and "+
				"the jobs' hf_tokens cross the network in the clear; set [tls] cert_file and key_file, or listen on "+
				"127.0.0.1 behind a TLS proxy", "addr", l.Addr().String())
		}
		serve(l, a.srv.BodyDeadline(dash.Mount(api)), nil, tlsConf)
	}
	for _, l := range listeners["admin"] {
		serve(l, a.srv.BodyDeadline(api), a.srv.AdminConnContext, nil)
	}
	for _, l := range listeners["metrics"] {
		serve(l, a.srv.MetricsHandler(), nil, nil)
	}
	loopCtx, cancel := context.WithCancel(context.Background())
	a.loopCancel, a.loopsDone = cancel, make(chan struct{})
	go func() { a.srv.Run(loopCtx); close(a.loopsDone) }()
	close(a.ready)
	return nil
}

// reachableFromNetwork reports whether a listener's address is a TCP
// address other than loopback (the unspecified address included).
func reachableFromNetwork(a net.Addr) bool {
	tcp, ok := a.(*net.TCPAddr)
	return ok && !tcp.IP.IsLoopback()
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
	if a.dbLock != nil {
		a.dbLock.Close()
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

// Reload re-reads the configuration (SIGHUP). Timers, limits and the log
// level apply at once; listeners, TLS and the database need a restart, and
// every reload warns about each of those that differs from what the daemon
// started with. An invalid file keeps the running config.
func (a *App) Reload() error {
	cfg, _, err := config.LoadOrchestrator(a.args, a.getenv)
	if err != nil {
		return err
	}
	a.mu.Lock()
	prev := a.cfg
	a.cfg = cfg
	a.mu.Unlock()
	changes := config.Changes(prev, cfg)
	for _, c := range changes {
		a.log.Info("configuration changed", "key", c.Key, "old", c.Old, "new", c.New, "set_at", cfg.Origin(c.Key))
	}
	for _, key := range restartKeys(a.started, cfg) {
		a.log.Warn("config change needs a restart to take effect", "key", key)
	}
	if a.level != nil {
		a.level.Set(cfg.Log.SlogLevel())
	}
	a.srv.SetOptions(orchestrator.OptionsFrom(cfg))
	a.log.Info("configuration reloaded", "changed_keys", len(changes))
	return nil
}

// restartKeys names the settings that differ between the running and a new
// configuration and only take effect after a restart.
func restartKeys(running, next *config.Orchestrator) []string {
	var out []string
	for _, c := range []struct {
		name     string
		old, new any
	}{
		{"server.listen", running.Server.Listen, next.Server.Listen},
		{"server.admin_socket", running.Server.AdminSocket, next.Server.AdminSocket},
		{"server.instance_id", running.Server.InstanceID, next.Server.InstanceID},
		{"server.public_url", running.Server.PublicURL, next.Server.PublicURL},
		{"tls", running.TLS, next.TLS},
		{"database", running.Database, next.Database},
		{"paths.state_dir", running.Paths.StateDir, next.Paths.StateDir},
		{"auth.failures_per_minute", running.Auth.FailuresPerMinute, next.Auth.FailuresPerMinute},
		{"auth.oidc", oidcWhat(running), oidcWhat(next)},
		{"auth.ldap", running.Auth.LDAP, next.Auth.LDAP},
		{"log.format", running.Log.Format, next.Log.Format},
		{"metrics.listen", running.Metrics.Listen, next.Metrics.Listen},
		{"artifacts (backend, dir, s3_*)", artifactsWhere(running), artifactsWhere(next)},
	} {
		if !reflect.DeepEqual(c.old, c.new) {
			out = append(out, c.name)
		}
	}
	return out
}
