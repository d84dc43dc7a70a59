package dashboard

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/audit"
	"github.com/simpletuner/simpletuner-orchestration/internal/auth"
	"github.com/simpletuner/simpletuner-orchestration/internal/identity"
	"github.com/simpletuner/simpletuner-orchestration/internal/store"
)

const (
	// sessionCookie holds only a random session id; the store keeps its SHA-256.
	sessionCookie = "st_session"
	// signinCookie pairs the sign-in form with the browser that loaded it, so
	// another site cannot sign a visitor in under the attacker's token.
	signinCookie = "st_signin"
)

// session is a signed-in browser: its cookie's id and the principal of the
// admin token it stands for.
type session struct {
	id        string // the cookie value; never stored
	idHash    string
	principal auth.Principal
	csrf      string
	// ownToken: the token was made for this session (a person's sign-in
	// through a provider) and ends with it.
	ownToken bool
}

// Can reports whether the session's token holds scope (templates hide what
// the token cannot do; the API refuses it regardless).
func (s *session) Can(scope string) bool { return s.principal.Has(scope) }

// Name is the token's name.
func (s *session) Name() string { return s.principal.Name }

// Roles says what a person is in each team ("lead in ml, viewer in
// default"); "" for a token, whose scopes say it.
func (s *session) Roles() string {
	var parts []string
	for _, m := range s.principal.Memberships {
		if m.Team == "" {
			parts = append(parts, m.Role.String()+" of the fleet")
			continue
		}
		parts = append(parts, m.Role.String()+" in "+m.Team)
	}
	return strings.Join(parts, ", ")
}

// CSRF is the session's form token.
func (s *session) CSRF() string { return s.csrf }

func randomID() string {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		panic("crypto/rand failed: " + err.Error())
	}
	return base64.RawURLEncoding.EncodeToString(b)
}

func hashID(id string) string {
	sum := sha256.Sum256([]byte(id))
	return hex.EncodeToString(sum[:])
}

// csrfToken is derived from the secret session id, so it needs no storage, is
// fixed for the session's life, and reveals nothing about the id.
func csrfToken(id string) string {
	m := hmac.New(sha256.New, []byte(id))
	m.Write([]byte("simpletuner dashboard csrf"))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// cookie is one of the dashboard's cookies: Secure whenever browsers reach
// the dashboard over HTTPS, here or at a TLS proxy (server.public_url).
func (d *Dashboard) cookie(r *http.Request, name, value, path string, maxAge int) *http.Cookie {
	return &http.Cookie{Name: name, Value: value, Path: path, MaxAge: maxAge, HttpOnly: true,
		Secure: r.TLS != nil || d.opt.PublicURL != nil && d.opt.PublicURL.Scheme == "https", SameSite: http.SameSiteStrictMode}
}

// errNoSession: no cookie, an unknown or idle session, or a revoked token.
var errNoSession = errors.New("no session")

// touchEvery limits how often activity is written to the store.
func (d *Dashboard) touchEvery() time.Duration { return min(time.Minute, d.opt.IdleTimeout/10) }

// loadSession finds the browser's session and checks, on every request, that
// it is not idle and that its token is neither revoked nor expired. touch records activity
// (live updates do not: an open tab nobody looks at still expires).
func (d *Dashboard) loadSession(r *http.Request, touch bool) (*session, error) {
	c, err := r.Cookie(sessionCookie)
	if err != nil || len(c.Value) != 43 {
		return nil, errNoSession
	}
	hash := hashID(c.Value)
	ds, err := d.opt.Sessions.GetDashboardSession(r.Context(), hash)
	if errors.Is(err, store.ErrNotFound) {
		return nil, errNoSession
	}
	if err != nil {
		return nil, err
	}
	now := d.opt.Now()
	why := ""
	var principal auth.Principal
	switch {
	case ds.Token.RevokedAt != nil:
		why = "token revoked"
	case ds.Token.ExpiresAt != nil && !now.Before(*ds.Token.ExpiresAt):
		why = "token expired"
	case now.Sub(ds.LastSeen) > d.opt.IdleTimeout:
		why = "idle"
	default:
		principal, err = d.opt.API.TokenPrincipal(r.Context(), ds.Token)
		switch {
		case errors.Is(err, identity.ErrDisabled) || errors.Is(err, store.ErrNotFound):
			why = "person disabled"
		case err != nil:
			return nil, err
		}
	}
	if why != "" {
		rec := audit.New("admin:"+ds.TokenID, auth.PeerKey(r.RemoteAddr), "dashboard.session_end", "admin_token", ds.TokenID,
			audit.Success, map[string]string{"reason": why})
		if err := d.opt.Sessions.DeleteDashboardSession(r.Context(), hash, &rec); err != nil && !errors.Is(err, store.ErrNotFound) {
			d.opt.Log.Warn("dashboard: ending a session failed", "err", err)
		}
		return nil, errNoSession
	}
	if touch && now.Sub(ds.LastSeen) >= d.touchEvery() {
		if err := d.opt.Sessions.TouchDashboardSession(r.Context(), hash, now); err != nil && !errors.Is(err, store.ErrNotFound) {
			d.opt.Log.Warn("dashboard: recording session activity failed", "err", err)
		}
	}
	return &session{id: c.Value, idHash: hash, csrf: csrfToken(c.Value), principal: principal,
		ownToken: ds.Token.PersonID != "" && ds.Token.Name == sessionTokenName}, nil
}

// safeNext keeps a post-sign-in destination inside the dashboard.
func safeNext(next string) string {
	u, err := url.Parse(next)
	if err != nil || u.Scheme != "" || u.Host != "" || !strings.HasPrefix(u.Path, Prefix) ||
		strings.HasPrefix(u.Path, Prefix+"signin") || strings.Contains(u.Path, "..") || strings.HasPrefix(next, "//") {
		return Prefix
	}
	return u.RequestURI()
}

// signinURL sends the browser to sign in and then back to next.
func signinURL(next string, expired bool) string {
	q := url.Values{"next": {safeNext(next)}}
	if expired {
		q.Set("expired", "1")
	}
	return Prefix + "signin?" + q.Encode()
}

// needSignIn answers a request that has no valid session: a page goes to the
// sign-in form and comes back afterwards; an htmx update makes the whole page
// do so; anything else (the log stream) gets 401.
func (d *Dashboard) needSignIn(w http.ResponseWriter, r *http.Request, err error) {
	if err != nil && !errors.Is(err, errNoSession) {
		d.opt.Log.Error("dashboard: reading the session failed", "err", err)
		d.errorPage(w, r, nil, http.StatusServiceUnavailable, "The orchestrator's database did not answer. Try again shortly.")
		return
	}
	// A browser that sent a cookie had a session that ended: say so, and drop it.
	_, noCookie := r.Cookie(sessionCookie)
	expired := noCookie == nil
	if expired {
		http.SetCookie(w, d.cookie(r, sessionCookie, "", Prefix, -1))
	}
	switch {
	case r.Header.Get("HX-Request") == "true":
		next := Prefix
		if u, err := url.Parse(r.Header.Get("HX-Current-URL")); err == nil {
			next = u.RequestURI()
		}
		w.Header().Set("HX-Redirect", signinURL(next, expired))
		w.WriteHeader(http.StatusUnauthorized)
	case r.Method == http.MethodGet:
		http.Redirect(w, r, signinURL(r.URL.RequestURI(), expired), http.StatusSeeOther)
	case r.Method == http.MethodPost:
		// The form cannot be sent again after signing in; come back to the page it was on.
		next := Prefix
		if u, err := url.Parse(r.Header.Get("Referer")); err == nil && u.Host == r.Host {
			next = u.RequestURI()
		}
		http.Redirect(w, r, signinURL(next, expired), http.StatusSeeOther)
	default:
		http.Error(w, "sign in first", http.StatusUnauthorized)
	}
}

// sameOrigin refuses state-changing requests that another site started:
// Origin, when the browser sends it, must be this dashboard's (server.
// public_url's, behind a proxy; else this host as the request reached it);
// Sec-Fetch-Site must not say cross-site.
func (d *Dashboard) sameOrigin(r *http.Request) bool {
	if site := r.Header.Get("Sec-Fetch-Site"); site != "" && site != "same-origin" && site != "none" {
		return false
	}
	origin := r.Header.Get("Origin")
	if origin == "" {
		return true
	}
	if u := d.opt.PublicURL; u != nil {
		return strings.EqualFold(origin, u.Scheme+"://"+u.Host)
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	return origin == scheme+"://"+r.Host
}

// checkCSRF verifies a state-changing form: same origin and the session's token.
func (d *Dashboard) checkCSRF(r *http.Request, s *session) bool {
	if !d.sameOrigin(r) {
		return false
	}
	got := r.PostFormValue("csrf")
	return got != "" && hmac.Equal([]byte(got), []byte(s.csrf))
}

type handler func(w http.ResponseWriter, r *http.Request, s *session)

// page serves a GET page to a signed-in browser.
func (d *Dashboard) page(h handler) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		s, err := d.loadSession(r, true)
		if err != nil {
			d.needSignIn(w, r, err)
			return
		}
		w.Header().Set("Cache-Control", "no-store")
		h(w, r, s)
	}
}

// live serves an htmx update; it does not count as activity.
func (d *Dashboard) live(h handler) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		s, err := d.loadSession(r, false)
		if err != nil {
			d.needSignIn(w, r, err)
			return
		}
		w.Header().Set("Cache-Control", "no-store")
		h(w, r, s)
	}
}

// action serves a state-changing form post: signed in, same origin, CSRF token.
func (d *Dashboard) action(h handler) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		r.Body = http.MaxBytesReader(w, r.Body, 1<<20)
		s, err := d.loadSession(r, true)
		if err != nil {
			d.needSignIn(w, r, err)
			return
		}
		w.Header().Set("Cache-Control", "no-store")
		if !d.checkCSRF(r, s) {
			d.errorPage(w, r, s, http.StatusForbidden,
				"The form was refused: it did not come from this dashboard's page (its security token or origin did not match). Reload the page and try again.")
			return
		}
		h(w, r, s)
	}
}

// signinForm shows the sign-in page with a fresh form token.
func (d *Dashboard) signinForm(w http.ResponseWriter, r *http.Request) {
	if s, err := d.loadSession(r, false); err == nil && s != nil {
		http.Redirect(w, r, safeNext(r.URL.Query().Get("next")), http.StatusSeeOther)
		return
	}
	d.renderSignin(w, r, http.StatusOK, signinPage{Expired: r.URL.Query().Get("expired") == "1"})
}

// signinPage is what the sign-in page shows besides its forms: which of
// them failed and why, or a problem that concerns no form (single sign-on).
type signinPage struct {
	Next       string // where to go afterwards; "" is the request's next
	Expired    bool
	TokenError string
	LDAPError  string
	Username   string // kept in the LDAP form after a failure
	Problem    string
}

func (d *Dashboard) renderSignin(w http.ResponseWriter, r *http.Request, status int, p signinPage) {
	formToken := randomID()
	http.SetCookie(w, d.cookie(r, signinCookie, formToken, Prefix+"signin", 3600))
	w.Header().Set("Cache-Control", "no-store")
	next := p.Next
	if next == "" {
		next = r.FormValue("next")
	}
	d.render(w, r, status, "signin", map[string]any{
		"Next": safeNext(next), "FormToken": formToken, "Error": p.TokenError, "Expired": p.Expired,
		"LDAP": d.opt.LDAP != nil, "LDAPError": p.LDAPError, "Username": p.Username, "Problem": p.Problem,
		"OIDCName": d.opt.OIDCName, "OIDC": d.opt.OIDC != nil,
	}, nil)
}

// signinFormValid checks, before any credential, that a sign-in form came
// from this dashboard's page in this browser: same origin, and the form
// token of the page's cookie.
func (d *Dashboard) signinFormValid(r *http.Request) bool {
	fc, err := r.Cookie(signinCookie)
	return d.sameOrigin(r) && err == nil && hmac.Equal([]byte(fc.Value), []byte(r.PostFormValue("form_token")))
}

// signin exchanges an admin token for a session. The token is checked by the
// API itself (GET /api/auth/whoami), so a failure counts in the API's failure
// limiter for this peer like any other bad credential.
func (d *Dashboard) signin(w http.ResponseWriter, r *http.Request) {
	// The token is in the body, so it is read before any credential is
	// checked; only what needs no body is checked first (the form's origin
	// and cookie), and the body is kept small: a token, a form token, a path.
	r.Body = http.MaxBytesReader(w, r.Body, 8<<10)
	if !d.signinFormValid(r) {
		d.renderSignin(w, r, http.StatusForbidden, signinPage{TokenError: "The sign-in form expired or did not come from this page. Please try again."})
		return
	}
	token := strings.TrimSpace(r.PostFormValue("token"))
	if token == "" {
		d.renderSignin(w, r, http.StatusUnprocessableEntity, signinPage{TokenError: "Enter an admin token (it starts with sta_)."})
		return
	}
	// A refused token is counted and audited by the API, in aggregate with
	// every other failed authentication of this client, under this route.
	who, err := d.opt.API.AdminByToken(r, token, "POST "+Prefix+"signin")
	if err != nil {
		fail := d.failure(err, "sign-in")
		msg := "That token is not a valid admin token (unknown, revoked or mistyped)."
		switch fail.Status {
		case http.StatusTooManyRequests:
			msg = fmt.Sprintf("Too many failed sign-ins from this address; wait %d s and try again.", fail.RetryAfterSeconds)
		case http.StatusUnauthorized: // counted and audited by the API, see above
		default:
			msg = "Signing in failed: " + fail.Detail
		}
		d.renderSignin(w, r, fail.Status, signinPage{TokenError: msg})
		return
	}
	if err := d.startSession(w, r, who, map[string]string{"name": who.Name}); err != nil {
		d.renderSignin(w, r, http.StatusServiceUnavailable, signinPage{TokenError: "Could not start a session; try again shortly."})
		return
	}
	http.SetCookie(w, d.cookie(r, signinCookie, "", Prefix+"signin", -1))
	http.Redirect(w, r, safeNext(r.PostFormValue("next")), http.StatusSeeOther)
}

// startSession opens a session for the admin token who presented (a
// person's: the one made for this session) and sets its cookie.
func (d *Dashboard) startSession(w http.ResponseWriter, r *http.Request, who auth.Principal, details map[string]string) error {
	id := randomID()
	now := d.opt.Now().UTC()
	ip := auth.PeerKey(r.RemoteAddr)
	rec := audit.New(who.Actor(), ip, "dashboard.signin", "admin_token", who.TokenID, audit.Success, details)
	ua := r.UserAgent()
	if len(ua) > 256 {
		ua = ua[:256]
	}
	err := d.opt.Sessions.CreateDashboardSession(r.Context(), store.DashboardSession{
		IDHash: hashID(id), TokenID: who.TokenID, CreatedAt: now, LastSeen: now, PeerIP: ip, UserAgent: ua}, &rec)
	if err != nil {
		d.opt.Log.Error("dashboard: creating a session failed", "err", err)
		return err
	}
	// Sign-ins clear out sessions that went idle, so the table stays small
	// without a background loop.
	if _, err := d.opt.Sessions.DeleteIdleDashboardSessions(r.Context(), now.Add(-d.opt.IdleTimeout)); err != nil {
		d.opt.Log.Warn("dashboard: removing idle sessions failed", "err", err)
	}
	d.opt.Log.Info("dashboard sign-in", "token_id", who.TokenID, "peer", ip)
	// No MaxAge: the cookie lives with the browser session; the server decides expiry.
	http.SetCookie(w, d.cookie(r, sessionCookie, id, Prefix, 0))
	return nil
}

// signout ends the session on the server and in the browser.
func (d *Dashboard) signout(w http.ResponseWriter, r *http.Request, s *session) {
	rec := audit.New(s.principal.Actor(), auth.PeerKey(r.RemoteAddr), "dashboard.signout", "admin_token", s.principal.TokenID, audit.Success, nil)
	if err := d.opt.Sessions.DeleteDashboardSession(r.Context(), s.idHash, &rec); err != nil && !errors.Is(err, store.ErrNotFound) {
		d.errorPage(w, r, s, http.StatusServiceUnavailable, "Signing out failed; try again.")
		return
	}
	// A token made for this session has no other holder: it ends too.
	if s.ownToken {
		if err := d.opt.Sessions.RevokeAdminToken(r.Context(), s.principal.TokenID, nil); err != nil && !errors.Is(err, store.ErrNotFound) {
			d.opt.Log.Warn("dashboard: revoking a signed-out session's token failed", "err", err)
		}
	}
	http.SetCookie(w, d.cookie(r, sessionCookie, "", Prefix, -1))
	http.Redirect(w, r, Prefix+"signin?signed_out=1", http.StatusSeeOther)
}
