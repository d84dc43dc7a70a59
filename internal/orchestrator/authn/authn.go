// Package authn says who a request is: a worker by its token, an admin by
// an admin token or as a permitted user of the admin socket, or a caller the
// dashboard authenticated in process. Failed authentications are counted per
// client (a client past the limit is refused with 429) and audited in
// aggregate (package authfail). The worker protocol, the job uploads and the
// admin API ask it; it knows none of them.
package authn

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/audit"
	"github.com/simpletuner/simpletuner-orchestration/internal/auth"
	"github.com/simpletuner/simpletuner-orchestration/internal/identity"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator/authfail"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator/metrics"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator/web"
	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
	"github.com/simpletuner/simpletuner-orchestration/internal/store"
)

// Store is what authentication reads of the store, and where it audits.
type Store interface {
	GetWorkerByTokenHash(ctx context.Context, hash string) (store.Worker, error)
	GetReportingWorkerByTokenHash(ctx context.Context, hash string) (store.Worker, error)
	GetAdminTokenByHash(ctx context.Context, hash string) (store.AdminToken, error)
	AppendAudit(ctx context.Context, rec audit.Record) error
}

// Options are the settings authentication reads.
type Options struct {
	// AdminGroup's members (and root) may use the admin socket.
	AdminGroup string
	// FailureAuditInterval is how often the gathered failures are audited,
	// in at most FailureAuditMaxPeers records.
	FailureAuditInterval time.Duration
	FailureAuditMaxPeers int
}

// Authenticator authenticates requests.
type Authenticator struct {
	Store   Store
	Log     *slog.Logger
	Limiter *auth.FailureLimiter
	Metrics *metrics.Metrics
	Options func() Options
	// Resolver says who a valid admin token stands for: itself, or the
	// person it belongs to as they are now.
	Resolver identity.Resolver

	// failures gathers failed authentications for the audit log.
	failures authfail.Gatherer
}

type ctxKey int

const peerKey ctxKey = 1

// localPeer is what the admin unix socket learned about its client.
type localPeer struct {
	uid     uint32
	peer    auth.Peer
	allowed bool
}

// ConnContext records the peer credentials of an admin-socket connection;
// use it as http.Server.ConnContext for that listener.
func (a *Authenticator) ConnContext(ctx context.Context, c net.Conn) context.Context {
	p, err := auth.PeerOf(c)
	if err != nil {
		a.Log.Warn("admin socket: cannot read peer credentials", "err", err)
		return context.WithValue(ctx, peerKey, localPeer{uid: ^uint32(0)})
	}
	peer := localPeer{uid: p.UID, peer: p}
	peer.allowed = a.localAllowed(peer)
	return context.WithValue(ctx, peerKey, peer)
}

// localAllowed reports whether an admin-socket peer is root or in the admin
// group, by the groups its process had when it connected.
func (a *Authenticator) localAllowed(peer localPeer) bool {
	group := a.Options().AdminGroup
	ok, how, err := auth.PeerAllowed(peer.peer, group)
	if err != nil {
		a.Log.Warn("admin socket: group lookup failed", "uid", peer.uid, "group", group, "err", err)
	}
	a.Log.Debug("admin socket peer", "uid", peer.uid, "pid", peer.peer.PID, "allowed", ok, "decided_by", how)
	return ok
}

func peerOf(r *http.Request) (localPeer, bool) {
	p, ok := r.Context().Value(peerKey).(localPeer)
	return p, ok
}

// ViaAdminSocket reports whether r came over the admin unix socket.
func ViaAdminSocket(r *http.Request) bool {
	_, ok := peerOf(r)
	return ok
}

// PeerIP is the client's address without the port ("local" on the unix socket).
func PeerIP(r *http.Request) string {
	if ViaAdminSocket(r) {
		return "local"
	}
	return auth.PeerKey(r.RemoteAddr)
}

// limitKey is what a client's failed authentications are counted under: its
// address, or the /64 of an IPv6 one ("local" on the unix socket).
func limitKey(r *http.Request) string {
	if ViaAdminSocket(r) {
		return "local"
	}
	return auth.LimitKey(r.RemoteAddr)
}

// Presenter is who presented a credential: the key its failures are counted
// under, its address for the audit, and the route they are audited under.
type Presenter struct{ key, ip, route string }

// PresenterOf is the client of r.
func PresenterOf(r *http.Request) Presenter {
	return Presenter{key: limitKey(r), ip: PeerIP(r), route: r.Method + " " + routeOf(r)}
}

// Limited refuses (429) a client that has failed too often. A well-formed
// credential still gets its lookup, so a valid one is never locked out;
// garbage from a flooding client costs no database work. Neither writes
// anything: failures are audited in aggregate (package authfail).
func (a *Authenticator) Limited(c Presenter, token string, wellFormed bool) error {
	wait, blocked := a.Limiter.Blocked(c.key)
	if !blocked || wellFormed {
		return nil
	}
	a.failures.Note(c.key, c.ip, c.route, token, true)
	return a.tooMany(c, wait)
}

func (a *Authenticator) tooMany(c Presenter, wait time.Duration) error {
	a.Metrics.AuthFailures.Add(1)
	e := web.Errorf(http.StatusTooManyRequests, protocol.CodeRateLimited, "too many failed authentication attempts from %s; retry later", c.ip)
	e.RetryAfter = wait
	return e
}

// Refused counts a refused credential: 401, or 429 once over the limit.
func (a *Authenticator) Refused(c Presenter, token, code, detail string) error {
	a.Limiter.Fail(c.key)
	a.Metrics.AuthFailures.Add(1)
	wait, blocked := a.Limiter.Blocked(c.key)
	a.failures.Note(c.key, c.ip, c.route, token, blocked)
	if blocked {
		return a.tooMany(c, wait)
	}
	return web.Errorf(http.StatusUnauthorized, code, "%s", detail)
}

// SignInLimited refuses (429) a client past the failure limit before a
// sign-in with a password or an ID token asks anyone about it.
func (a *Authenticator) SignInLimited(r *http.Request) error {
	c := PresenterOf(r)
	wait, blocked := a.Limiter.Blocked(c.key)
	if !blocked {
		return nil
	}
	a.failures.Note(c.key, c.ip, c.route, "", true)
	return a.tooMany(c, wait)
}

// SignInFailed counts a refused sign-in toward r's client's limit and the
// failure audit; it returns refusal, or 429 once the client is over.
func (a *Authenticator) SignInFailed(r *http.Request, refusal error) error {
	c := PresenterOf(r)
	a.Limiter.Fail(c.key)
	a.Metrics.AuthFailures.Add(1)
	wait, blocked := a.Limiter.Blocked(c.key)
	a.failures.Note(c.key, c.ip, c.route, "", blocked)
	if blocked {
		return a.tooMany(c, wait)
	}
	return refusal
}

// routeOf names the endpoint of a request without the ids in its path, so
// that failures on many jobs count as one route.
func routeOf(r *http.Request) string {
	p := r.URL.Path
	for _, prefix := range []string{"/api/workers/job/", "/api/queue/", "/api/admin/workers/", "/api/admin/tokens/"} {
		if rest, ok := strings.CutPrefix(p, prefix); ok && rest != "" && rest != "submit" && rest != "stats" {
			tail := ""
			if i := strings.IndexByte(rest, '/'); i >= 0 {
				tail = rest[i:]
			}
			return prefix + ":id" + tail
		}
	}
	return p
}

// Worker authenticates r's X-Worker-Token: the worker it belongs to, or the
// refusal (401, 429) to answer.
func (a *Authenticator) Worker(r *http.Request) (store.Worker, error) {
	return a.worker(r, a.Store.GetWorkerByTokenHash)
}

// ReportingWorker is Worker for the job reports and logs, which come several
// times per job and use only part of the worker's row (see
// store.GetReportingWorkerByTokenHash): it returns that part.
func (a *Authenticator) ReportingWorker(r *http.Request) (store.Worker, error) {
	return a.worker(r, a.Store.GetReportingWorkerByTokenHash)
}

// workerLookup finds the worker a token hash belongs to.
type workerLookup func(ctx context.Context, hash string) (store.Worker, error)

func (a *Authenticator) worker(r *http.Request, lookup workerLookup) (store.Worker, error) {
	token := strings.TrimSpace(r.Header.Get("X-Worker-Token"))
	c := PresenterOf(r)
	if err := a.Limited(c, token, auth.WellFormed(token)); err != nil {
		return store.Worker{}, err
	}
	wk, err := workerByToken(r, lookup, token)
	if errors.Is(err, store.ErrNotFound) {
		err = a.Refused(c, token, protocol.CodeInvalidToken, "Invalid worker token: "+why(token, auth.KindWorker))
	}
	return wk, err
}

func workerByToken(r *http.Request, lookup workerLookup, token string) (store.Worker, error) {
	if token == "" {
		return store.Worker{}, store.ErrNotFound
	}
	hash := auth.Hash(token)
	wk, err := lookup(r.Context(), hash)
	if err != nil {
		return wk, err
	}
	// The lookup is by digest; compare again in constant time so a backend
	// that matched loosely can never let a different token through.
	if !auth.Equal(wk.TokenHash, hash) {
		return store.Worker{}, store.ErrNotFound
	}
	return wk, nil
}

// inProcessKey marks a request built inside this process, by the dashboard,
// for a caller it has already authenticated. The key type is unexported and a
// context value cannot arrive over the network, so only code linked into the
// daemon that calls WithPrincipal can set it.
type inProcessKey struct{}

// WithPrincipal returns ctx carrying p as the authenticated caller of an API
// request that the dashboard constructs and serves in process. The API then
// checks p's scopes like those of a token sent in a header. The caller must
// have verified p (its session and token) itself.
func WithPrincipal(ctx context.Context, p auth.Principal) context.Context {
	return context.WithValue(ctx, inProcessKey{}, p)
}

// Authenticate returns the admin caller of r: the dashboard's in-process
// caller, the admin socket's peer, or the admin token r presents. With no
// credential it sets WWW-Authenticate on w for the 401.
func (a *Authenticator) Authenticate(w http.ResponseWriter, r *http.Request) (auth.Principal, error) {
	if p, ok := r.Context().Value(inProcessKey{}).(auth.Principal); ok {
		return p, nil
	}
	if peer, ok := peerOf(r); ok {
		if !peer.allowed {
			return auth.Principal{}, web.Errorf(http.StatusForbidden, protocol.CodeForbidden,
				"uid %d is neither root nor a member of the group %q", peer.uid, a.Options().AdminGroup)
		}
		return auth.LocalPrincipal(peer.uid, true), nil
	}
	token, err := adminToken(r)
	if err != nil {
		return auth.Principal{}, err
	}
	if token == "" {
		w.Header().Set("WWW-Authenticate", `Bearer realm="simpletuner"`)
		return auth.Principal{}, web.Errorf(http.StatusUnauthorized, protocol.CodeUnauthorized,
			"authentication required: send an admin token as 'Authorization: Bearer sta_…' or 'X-API-Key'")
	}
	return a.adminByToken(r.Context(), PresenterOf(r), token)
}

// AdminByToken authenticates an admin token that r carries elsewhere than
// in a header (the dashboard's sign-in form) as the API does a header's: its
// failures count toward r's client's limit and are audited, in aggregate with
// the client's others, under route.
func (a *Authenticator) AdminByToken(r *http.Request, token, route string) (auth.Principal, error) {
	c := PresenterOf(r)
	c.route = route
	return a.adminByToken(r.Context(), c, token)
}

func (a *Authenticator) adminByToken(ctx context.Context, c Presenter, token string) (auth.Principal, error) {
	if err := a.Limited(c, token, auth.WellFormed(token)); err != nil {
		return auth.Principal{}, err
	}
	hash := auth.Hash(token)
	t, err := a.Store.GetAdminTokenByHash(ctx, hash)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return auth.Principal{}, err
	}
	if err != nil || t.RevokedAt != nil || !auth.Equal(t.Hash, hash) {
		return auth.Principal{}, a.Refused(c, token, protocol.CodeUnauthorized, "invalid admin token: "+why(token, auth.KindAdmin))
	}
	if Expired(t, time.Now()) {
		// Not counted as a failure: the holder had the token rightly, and
		// a command line that runs on with it must not lock its address out.
		return auth.Principal{}, ExpiredError(*t.ExpiresAt)
	}
	p, err := a.Resolver.Principal(ctx, t)
	if errors.Is(err, identity.ErrDisabled) || errors.Is(err, store.ErrNotFound) {
		return auth.Principal{}, a.Refused(c, token, protocol.CodeUnauthorized, "invalid admin token: the person it belongs to is disabled")
	}
	return p, err
}

// PasswordLimited refuses (429) a password sign-in (the dashboard's LDAP
// form) from a client that has failed too often, with tokens or passwords:
// they share one count per client.
func (a *Authenticator) PasswordLimited(r *http.Request, route string) error {
	c := PresenterOf(r)
	c.route = route
	return a.Limited(c, "", false)
}

// PasswordRefused counts a refused password as a refused token is counted
// and audited (in aggregate, under route): 401, or 429 once over the limit.
func (a *Authenticator) PasswordRefused(r *http.Request, route string) error {
	c := PresenterOf(r)
	c.route = route
	return a.Refused(c, "", protocol.CodeUnauthorized, "invalid user name or password")
}

// Expired reports whether t's life has run out by now.
func Expired(t store.AdminToken, now time.Time) bool {
	return t.ExpiresAt != nil && !now.Before(*t.ExpiresAt)
}

// ExpiredError is the 401 of a token that expired at when.
func ExpiredError(when time.Time) error {
	return web.Errorf(http.StatusUnauthorized, protocol.CodeTokenExpired,
		"this token expired at %s; run simpletunerctl login to get a new one", when.UTC().Format(time.RFC3339))
}

// TokenPrincipal is the caller a valid admin token stands for (Resolver).
func (a *Authenticator) TokenPrincipal(ctx context.Context, t store.AdminToken) (auth.Principal, error) {
	return a.Resolver.Principal(ctx, t)
}

// adminToken is the admin token a request presents, "" when none.
func adminToken(r *http.Request) (string, error) {
	token := strings.TrimSpace(r.Header.Get("X-API-Key"))
	if h := r.Header.Get("Authorization"); token == "" && h != "" {
		scheme, rest, _ := strings.Cut(h, " ")
		if !strings.EqualFold(scheme, "Bearer") {
			return "", web.Errorf(http.StatusUnauthorized, protocol.CodeUnauthorized, "the Authorization header must use the Bearer scheme")
		}
		token = strings.TrimSpace(rest)
	}
	return token, nil
}

// StillAllowed checks again, for a long-lived response, that the credential
// the request presented still grants scope: the admin token is not revoked,
// the admin-socket user is still root or in the admin group. It returns the
// caller as it is now (a person's roles may have changed since the request
// began), for the caller to re-check what it may see. An error means the
// store could not say; the caller decides whether to carry on.
func (a *Authenticator) StillAllowed(ctx context.Context, r *http.Request, p auth.Principal, scope string) (auth.Principal, bool, error) {
	switch p.Kind {
	case auth.KindLocal:
		peer, ok := peerOf(r)
		if !ok {
			return p, false, nil
		}
		return p, a.localAllowed(peer), nil
	case auth.KindAdminToken, auth.KindPerson:
		token, err := adminToken(r)
		if err != nil || token == "" {
			return p, false, nil
		}
		hash := auth.Hash(token)
		t, err := a.Store.GetAdminTokenByHash(ctx, hash)
		if errors.Is(err, store.ErrNotFound) {
			return p, false, nil
		}
		if err != nil {
			return p, true, err
		}
		if t.RevokedAt != nil || !auth.Equal(t.Hash, hash) || t.ID != p.TokenID || Expired(t, time.Now()) {
			return p, false, nil
		}
		now, err := a.Resolver.Principal(ctx, t)
		if errors.Is(err, identity.ErrDisabled) || errors.Is(err, store.ErrNotFound) {
			return p, false, nil
		}
		if err != nil {
			return p, true, err
		}
		return now, now.Has(scope), nil
	}
	return p, false, nil
}

// why explains a refused credential from its shape where the shape shows it,
// without echoing it.
func why(token, kind string) string {
	if err := auth.Diagnose(token, kind); err != nil {
		return err.Error()
	}
	return "unknown, rotated or revoked"
}

// FlushFailures writes the interval's auth.failure records (package
// authfail gathers them): one per client, at most FailureAuditMaxPeers of
// them, and one more that sums up the clients past that.
func (a *Authenticator) FlushFailures(ctx context.Context) {
	for _, rec := range a.failures.Records(a.Options().FailureAuditMaxPeers) {
		if err := a.Store.AppendAudit(ctx, rec); err != nil {
			a.Log.Warn("audit write failed", "action", "auth.failure", "err", err)
			return
		}
	}
}

// RunFailureAudit flushes every FailureAuditInterval, and once more when ctx ends.
func (a *Authenticator) RunFailureAudit(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			bg, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			a.FlushFailures(bg)
			cancel()
			return
		case <-time.After(a.Options().FailureAuditInterval):
			a.FlushFailures(ctx)
		}
	}
}
