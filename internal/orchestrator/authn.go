package orchestrator

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/julienschmidt/httprouter"

	"github.com/simpletuner/simpletuner-orchestration/internal/auth"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator/web"
	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
	"github.com/simpletuner/simpletuner-orchestration/internal/store"
)

type workerHandler func(w http.ResponseWriter, r *http.Request, ps httprouter.Params, wk store.Worker) error

// peerIP is the client's address without the port ("local" on the unix socket).
func peerIP(r *http.Request) string {
	if _, ok := peerOf(r); ok {
		return "local"
	}
	return auth.PeerKey(r.RemoteAddr)
}

// limitKey is what a client's failed authentications are counted under: its
// address, or the /64 of an IPv6 one ("local" on the unix socket).
func limitKey(r *http.Request) string {
	if _, ok := peerOf(r); ok {
		return "local"
	}
	return auth.LimitKey(r.RemoteAddr)
}

// presenter is who presented a credential: the key its failures are counted
// under, its address for the audit, and the route they are audited under.
type presenter struct{ key, ip, route string }

func presenterOf(r *http.Request) presenter {
	return presenter{key: limitKey(r), ip: peerIP(r), route: r.Method + " " + routeOf(r)}
}

// limited refuses (429) a client that has failed too often. A well-formed
// credential still gets its lookup, so a valid one is never locked out;
// garbage from a flooding client costs no database work. Neither writes
// anything: failures are audited in aggregate (package authfail).
func (s *Server) limited(c presenter, token string, wellFormed bool) error {
	wait, blocked := s.limiter.Blocked(c.key)
	if !blocked || wellFormed {
		return nil
	}
	s.failures.Note(c.key, c.ip, c.route, token, true)
	return s.tooMany(c, wait)
}

func (s *Server) tooMany(c presenter, wait time.Duration) error {
	s.metrics.AuthFailures.Add(1)
	e := web.Errorf(http.StatusTooManyRequests, protocol.CodeRateLimited, "too many failed authentication attempts from %s; retry later", c.ip)
	e.RetryAfter = wait
	return e
}

// refused counts a refused credential: 401, or 429 once over the limit.
func (s *Server) refused(c presenter, token, code, detail string) error {
	s.limiter.Fail(c.key)
	s.metrics.AuthFailures.Add(1)
	wait, blocked := s.limiter.Blocked(c.key)
	s.failures.Note(c.key, c.ip, c.route, token, blocked)
	if blocked {
		return s.tooMany(c, wait)
	}
	return web.Errorf(http.StatusUnauthorized, code, "%s", detail)
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

// worker authenticates X-Worker-Token and passes the worker on.
func (s *Server) worker(h workerHandler) httprouter.Handle {
	return s.authWorker(s.store.GetWorkerByTokenHash, h)
}

// reportingWorker is worker for the job reports and logs, which come
// several times per job and use only part of the worker's row (see
// store.GetReportingWorkerByTokenHash); h gets that part.
func (s *Server) reportingWorker(h workerHandler) httprouter.Handle {
	return s.authWorker(s.store.GetReportingWorkerByTokenHash, h)
}

// workerLookup finds the worker a token hash belongs to.
type workerLookup func(ctx context.Context, hash string) (store.Worker, error)

// authWorker checks X-Worker-Token, finding its worker with lookup, and
// the request's workerd session, then passes the worker on to h.
func (s *Server) authWorker(lookup workerLookup, h workerHandler) httprouter.Handle {
	return func(w http.ResponseWriter, r *http.Request, ps httprouter.Params) {
		token := strings.TrimSpace(r.Header.Get("X-Worker-Token"))
		c := presenterOf(r)
		if err := s.limited(c, token, auth.WellFormed(token)); err != nil {
			s.writeError(w, r, err)
			return
		}
		wk, err := workerByToken(r, lookup, token)
		if errors.Is(err, store.ErrNotFound) {
			err = s.refused(c, token, protocol.CodeInvalidToken, "Invalid worker token: "+why(token, auth.KindWorker))
		}
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		// A registration decides on the session itself (it may take it over).
		if !strings.HasSuffix(r.URL.Path, "/workers/register") {
			if err := s.checkSession(r, wk); err != nil {
				s.writeError(w, r, err)
				return
			}
		}
		if err := h(w, r, ps, wk); err != nil {
			s.writeError(w, r, err)
		}
	}
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
// request that the dashboard constructs and serves through Handler() in
// process. The API then checks p's scopes like those of a token sent in a
// header. The caller must have verified p (its session and token) itself.
func WithPrincipal(ctx context.Context, p auth.Principal) context.Context {
	return context.WithValue(ctx, inProcessKey{}, p)
}

func (s *Server) principal(w http.ResponseWriter, r *http.Request) (auth.Principal, error) {
	if p, ok := r.Context().Value(inProcessKey{}).(auth.Principal); ok {
		return p, nil
	}
	if peer, ok := peerOf(r); ok {
		if !peer.allowed {
			return auth.Principal{}, web.Errorf(http.StatusForbidden, protocol.CodeForbidden,
				"uid %d is neither root nor a member of the group %q", peer.uid, s.options().AdminGroup)
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
	return s.adminByToken(r.Context(), presenterOf(r), token)
}

// AdminByToken authenticates an admin token that r carries elsewhere than
// in a header (the dashboard's sign-in form) as the API does a header's: its
// failures count toward r's client's limit and are audited, in aggregate with
// the client's others, under route.
func (s *Server) AdminByToken(r *http.Request, token, route string) (auth.Principal, error) {
	c := presenterOf(r)
	c.route = route
	return s.adminByToken(r.Context(), c, token)
}

func (s *Server) adminByToken(ctx context.Context, c presenter, token string) (auth.Principal, error) {
	if err := s.limited(c, token, auth.WellFormed(token)); err != nil {
		return auth.Principal{}, err
	}
	hash := auth.Hash(token)
	t, err := s.store.GetAdminTokenByHash(ctx, hash)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return auth.Principal{}, err
	}
	if err != nil || t.RevokedAt != nil || !auth.Equal(t.Hash, hash) {
		return auth.Principal{}, s.refused(c, token, protocol.CodeUnauthorized, "invalid admin token: "+why(token, auth.KindAdmin))
	}
	return auth.Principal{Kind: auth.KindAdminToken, ID: t.ID, Name: t.Name, Scopes: t.Scopes, Team: t.Team,
		MaxPriority: t.MaxPriority}, nil
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

// stillAllowed checks again, for a long-lived response, that the credential
// the request presented still grants scope: the admin token is not revoked,
// the admin-socket user is still root or in the admin group. An error means
// the store could not say; the caller decides whether to carry on.
func (s *Server) stillAllowed(ctx context.Context, r *http.Request, p auth.Principal, scope string) (bool, error) {
	switch p.Kind {
	case auth.KindLocal:
		peer, ok := peerOf(r)
		if !ok {
			return false, nil
		}
		return s.localAllowed(peer), nil
	case auth.KindAdminToken:
		token, err := adminToken(r)
		if err != nil || token == "" {
			return false, nil
		}
		hash := auth.Hash(token)
		t, err := s.store.GetAdminTokenByHash(ctx, hash)
		if errors.Is(err, store.ErrNotFound) {
			return false, nil
		}
		if err != nil {
			return true, err
		}
		now := auth.Principal{Kind: auth.KindAdminToken, ID: t.ID, Scopes: t.Scopes}
		return t.RevokedAt == nil && auth.Equal(t.Hash, hash) && t.ID == p.ID && now.Has(scope), nil
	}
	return false, nil
}

// why explains a refused credential from its shape where the shape shows it,
// without echoing it.
func why(token, kind string) string {
	if err := auth.Diagnose(token, kind); err != nil {
		return err.Error()
	}
	return "unknown, rotated or revoked"
}
