// Package dashboard is simpletuner-orchestratord's web dashboard, served under
// /ui/ on the API listener.
//
// Pages are rendered on the server with html/template; a small vendored htmx
// polls the live parts, and a short script of our own follows job logs and
// copies tokens. Every page reads without JavaScript. Assets are embedded and
// served under a content-hashed path, so they are cached for a year and a new
// build changes their URL.
//
// The dashboard holds no authority of its own: a signed-in browser has a
// server-side session (in the store, so it survives restarts and is shared by
// replicas) that stands for the admin token it was opened with: one a
// person typed in, or one made for the session of a person who signed in
// through an identity provider (OpenID Connect, LDAP). Every read and
// action is a call of the orchestrator's API (package api's requests and
// replies), made in process as that token's caller, so the API decides what
// the token may do exactly as it does for curl.
package dashboard

import (
	"context"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"io/fs"
	"log/slog"
	"mime"
	"net/http"
	"net/url"
	"path"
	"sort"
	"strings"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/audit"
	"github.com/simpletuner/simpletuner-orchestration/internal/store"
)

//go:embed static templates
var files embed.FS

// Prefix is where the dashboard is mounted.
const Prefix = "/ui/"

// DefaultIdleTimeout ends a session nobody used for this long.
const DefaultIdleTimeout = 30 * time.Minute

// SessionStore is the part of store.Store the dashboard uses: its own
// sessions, and the audit log for failed sign-ins.
type SessionStore interface {
	CreateDashboardSession(ctx context.Context, s store.DashboardSession, rec *audit.Record) error
	GetDashboardSession(ctx context.Context, idHash string) (store.DashboardSession, error)
	TouchDashboardSession(ctx context.Context, idHash string, seen time.Time) error
	DeleteDashboardSession(ctx context.Context, idHash string, rec *audit.Record) error
	DeleteIdleDashboardSessions(ctx context.Context, seenBefore time.Time) (int, error)
	AppendAudit(ctx context.Context, rec audit.Record) error
	// CreateAdminToken makes the token a person's session acts with.
	CreateAdminToken(ctx context.Context, t store.AdminToken, rec *audit.Record) error
	// RevokeAdminToken ends that token when its session is signed out.
	RevokeAdminToken(ctx context.Context, id string, rec *audit.Record) error
}

// Options configure a Dashboard.
type Options struct {
	// API is the orchestrator's admin and queue API (orchestrator.Server.API(),
	// an *adminapi.API), called in process as the session's caller; a sign-in
	// checks its token there (AdminByToken) as any client's.
	API API
	// HTTP is the orchestrator's HTTP API (orchestrator.Server.Handler()): a
	// job's live log is relayed from there.
	HTTP http.Handler
	// Sessions keeps the sign-in sessions.
	Sessions SessionStore
	// IdleTimeout ends sessions unused for this long (DefaultIdleTimeout if 0).
	IdleTimeout time.Duration
	// PollInterval is how often open pages refresh their live parts (5 s if 0).
	PollInterval time.Duration
	// PublicURL is where browsers reach the dashboard when that is not this
	// listener (a TLS proxy in front: server.public_url); nil: as requests
	// arrive.
	PublicURL *url.URL
	// OIDC, when set, offers single sign-on with an OpenID provider under
	// the name OIDCName; LDAP, when set, a directory user name and
	// password. People records their sign-ins (needed by either).
	OIDC     OIDC
	OIDCName string
	LDAP     LDAP
	People   SignIns
	// Version is shown in the footer.
	Version string
	Log     *slog.Logger
	// Now is the clock (time.Now if nil); tests move it to expire sessions.
	Now func() time.Time
}

// Dashboard serves the web UI.
type Dashboard struct {
	opt       Options
	mux       *http.ServeMux
	pages     map[string]*pageTemplate
	assetPath string // Prefix + "static/<content hash>/"
	static    fs.FS
	notices   notices
}

// New builds a Dashboard.
func New(opt Options) (*Dashboard, error) {
	if opt.IdleTimeout <= 0 {
		opt.IdleTimeout = DefaultIdleTimeout
	}
	if opt.PollInterval <= 0 {
		opt.PollInterval = 5 * time.Second
	}
	if opt.Log == nil {
		opt.Log = slog.New(slog.DiscardHandler)
	}
	if opt.Now == nil {
		opt.Now = time.Now
	}
	if opt.OIDCName == "" {
		opt.OIDCName = "single sign-on"
	}
	static, err := fs.Sub(files, "static")
	if err != nil {
		return nil, err
	}
	hash, err := contentHash(static)
	if err != nil {
		return nil, err
	}
	d := &Dashboard{opt: opt, static: static, assetPath: Prefix + "static/" + hash + "/"}
	if d.pages, err = d.parseTemplates(); err != nil {
		return nil, err
	}
	d.routes()
	return d, nil
}

// Handler serves everything under Prefix.
func (d *Dashboard) Handler() http.Handler { return d.mux }

// Mount serves the dashboard under Prefix, sends "/" there, and passes every
// other request to api.
func (d *Dashboard) Mount(api http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case strings.HasPrefix(r.URL.Path, Prefix):
			d.mux.ServeHTTP(w, r)
		case r.URL.Path == "/" || r.URL.Path == strings.TrimSuffix(Prefix, "/"):
			http.Redirect(w, r, Prefix, http.StatusFound)
		default:
			api.ServeHTTP(w, r)
		}
	})
}

// contentHash is a short digest of every static file, used in asset URLs.
func contentHash(fsys fs.FS) (string, error) {
	var names []string
	err := fs.WalkDir(fsys, ".", func(p string, e fs.DirEntry, err error) error {
		if err == nil && !e.IsDir() {
			names = append(names, p)
		}
		return err
	})
	if err != nil {
		return "", err
	}
	sort.Strings(names)
	h := sha256.New()
	for _, n := range names {
		b, err := fs.ReadFile(fsys, n)
		if err != nil {
			return "", err
		}
		h.Write([]byte(n))
		h.Write([]byte{0})
		h.Write(b)
	}
	return hex.EncodeToString(h.Sum(nil))[:12], nil
}

// contentSecurityPolicy allows only this origin's own scripts, styles and
// connections: no inline script or style, no framing, forms post only here.
const contentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; " +
	"connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"

// secure sets the headers every dashboard response carries.
func secure(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hd := w.Header()
		hd.Set("Content-Security-Policy", contentSecurityPolicy)
		hd.Set("X-Content-Type-Options", "nosniff")
		hd.Set("X-Frame-Options", "DENY")
		hd.Set("Referrer-Policy", "same-origin")
		hd.Set("Cross-Origin-Opener-Policy", "same-origin")
		hd.Set("Cross-Origin-Resource-Policy", "same-origin")
		h.ServeHTTP(w, r)
	})
}

// serveStatic serves an embedded asset. Its URL holds the hash of all assets,
// so it may be cached for a year; a URL with any other hash is gone.
func (d *Dashboard) serveStatic(w http.ResponseWriter, r *http.Request) {
	if r.PathValue("hash")+"/" != strings.TrimPrefix(d.assetPath, Prefix+"static/") {
		http.NotFound(w, r)
		return
	}
	name := r.PathValue("file")
	b, err := fs.ReadFile(d.static, name)
	if err != nil || strings.Contains(name, "/") {
		http.NotFound(w, r)
		return
	}
	ct := mime.TypeByExtension(path.Ext(name))
	if ct == "" {
		ct = "application/octet-stream"
	}
	w.Header().Set("Content-Type", ct)
	w.Header().Set("Cache-Control", "public, max-age=31536000, immutable")
	_, _ = w.Write(b)
}

func (d *Dashboard) asset(name string) string { return d.assetPath + name }
