package dashboard

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/simpletuner/simpletuner-orchestration/internal/audit"
	"github.com/simpletuner/simpletuner-orchestration/internal/auth"
	"github.com/simpletuner/simpletuner-orchestration/internal/identity"
	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
	"github.com/simpletuner/simpletuner-orchestration/internal/store"
)

// People sign in through an identity provider: an OpenID Connect provider
// (single sign-on) or an LDAP directory. Each sign-in gets an admin token
// of its own that belongs to the person (never shown: only its hash is
// kept), and a session that stands for it; the API then treats the
// session as the person as they are now, so disabling them ends it.

// OIDC is the OpenID Connect sign-in (package identity/oidc's Provider).
type OIDC interface {
	// Begin stores a sign-in that will come back to returnTo and returns
	// the provider's URL to send the browser to.
	Begin(ctx context.Context, returnTo string) (string, error)
	// Callback finishes the sign-in from the query the provider sent the
	// browser back with; it also returns the returnTo of Begin.
	Callback(ctx context.Context, query url.Values) (identity.Result, string, error)
}

// LDAP checks a directory user name and password (package identity/ldap's
// Authenticator).
type LDAP interface {
	Authenticate(ctx context.Context, user, password string) (identity.Result, error)
}

// SignIns records that a provider vouched for a person and says who they
// are now (identity.Resolver.SignIn over the store).
type SignIns interface {
	SignIn(ctx context.Context, res identity.Result, peer string, now time.Time) (store.Person, auth.Principal, error)
}

const (
	// oidcCookie binds a single sign-on to the browser that started it: it
	// holds the sign-in's state, which must come back from the provider.
	// It is SameSite=Lax because the provider's redirect back is a
	// cross-site navigation, on which a Strict cookie is not sent.
	oidcCookie = "st_oidc"
	oidcPath   = Prefix + "auth/"
	// oidcCookieAge is how long a person has at the provider.
	oidcCookieAge = 600
	// sessionTokenName names the admin token a person's session acts with.
	sessionTokenName = "dashboard session"
)

// PersonSessionMaxAge is how long a person's dashboard session lasts at
// most, however busy: its token expires then, and they sign in again
// (the provider may ask for nothing if its own session is still on).
const PersonSessionMaxAge = 12 * time.Hour

// oidcStart sends the browser to the identity provider (a link on the
// sign-in page: a form could not redirect off this origin under the
// page's form-action policy).
func (d *Dashboard) oidcStart(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	if d.opt.OIDC == nil {
		d.renderSignin(w, r, http.StatusNotFound, signinPage{Problem: "Single sign-on is not set up on this orchestrator ([auth.oidc])."})
		return
	}
	next := safeNext(r.URL.Query().Get("next"))
	to, err := d.opt.OIDC.Begin(r.Context(), next)
	if err != nil {
		d.opt.Log.Warn("dashboard: starting a single sign-on failed", "err", err)
		d.renderSignin(w, r, http.StatusServiceUnavailable, signinPage{Next: next, Problem: d.oidcProblem(err)})
		return
	}
	u, err := url.Parse(to)
	if err != nil || u.Query().Get("state") == "" {
		d.renderSignin(w, r, http.StatusInternalServerError, signinPage{Next: next, Problem: "The identity provider's sign-in address is not usable."})
		return
	}
	c := d.cookie(r, oidcCookie, u.Query().Get("state"), oidcPath, oidcCookieAge)
	c.SameSite = http.SameSiteLaxMode
	http.SetCookie(w, c)
	http.Redirect(w, r, to, http.StatusSeeOther)
}

// oidcCallback is where the provider sends the browser back. A success
// answers 200 with a page that moves on by itself: the session cookie is
// SameSite=Strict, and a browser arriving from the provider's site would
// not send it on a redirect that followed at once.
func (d *Dashboard) oidcCallback(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	if d.opt.OIDC == nil {
		d.renderSignin(w, r, http.StatusNotFound, signinPage{Problem: "Single sign-on is not set up on this orchestrator ([auth.oidc])."})
		return
	}
	q := r.URL.Query()
	bound, err := r.Cookie(oidcCookie)
	if err != nil || q.Get("state") == "" || subtle.ConstantTimeCompare([]byte(bound.Value), []byte(q.Get("state"))) != 1 {
		d.auditSignInFailure(r, "oidc", "", "not started in this browser")
		d.renderSignin(w, r, http.StatusBadRequest, signinPage{Problem: "This sign-in was not started in this browser, or took too long. Start it again."})
		return
	}
	http.SetCookie(w, d.cookie(r, oidcCookie, "", oidcPath, -1))
	res, next, err := d.opt.OIDC.Callback(r.Context(), q)
	if err != nil {
		status := http.StatusBadRequest
		switch {
		case errors.Is(err, identity.ErrProviderUnavailable):
			status = http.StatusServiceUnavailable
		case errors.Is(err, identity.ErrDenied):
			status = http.StatusForbidden
		}
		d.opt.Log.Info("dashboard: single sign-on failed", "err", err)
		d.auditSignInFailure(r, "oidc", "", err.Error())
		d.renderSignin(w, r, status, signinPage{Next: next, Problem: d.oidcProblem(err)})
		return
	}
	if status, msg := d.personSignIn(w, r, res); status != 0 {
		d.renderSignin(w, r, status, signinPage{Next: next, Problem: msg})
		return
	}
	d.render(w, r, http.StatusOK, "signedin", map[string]any{"Next": safeNext(next)}, nil)
}

// oidcProblem is a failed single sign-on as a sentence for the person.
func (d *Dashboard) oidcProblem(err error) string {
	switch {
	case errors.Is(err, identity.ErrProviderUnavailable):
		return "The identity provider did not answer; single sign-on is unavailable for now. Try again shortly, or sign in another way."
	case errors.Is(err, identity.ErrState):
		return "This sign-in is unknown, was already used or has expired. Start it again."
	case errors.Is(err, identity.ErrDenied):
		return "The identity provider did not sign you in: " + strings.TrimPrefix(err.Error(), identity.ErrDenied.Error()+" ")
	case errors.Is(err, identity.ErrTokenInvalid):
		return "The identity provider's answer could not be trusted, so you were not signed in: " +
			strings.TrimPrefix(err.Error(), identity.ErrTokenInvalid.Error()+": ")
	}
	return "Single sign-on failed; try again shortly."
}

// ldapSignin signs a person in with a directory user name and password.
// Wrong passwords count toward the client's failed authentications like
// wrong tokens (the API's limiter), and the directory's own per-name
// throttle stands in front of the directory.
func (d *Dashboard) ldapSignin(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, 8<<10)
	if d.opt.LDAP == nil {
		d.renderSignin(w, r, http.StatusNotFound, signinPage{Problem: "Directory (LDAP) sign-in is not set up on this orchestrator ([auth.ldap])."})
		return
	}
	user := strings.TrimSpace(r.PostFormValue("username"))
	page := signinPage{Username: user}
	fail := func(status int, msg string) {
		page.LDAPError = msg
		d.renderSignin(w, r, status, page)
	}
	if !d.signinFormValid(r) {
		fail(http.StatusForbidden, "The sign-in form expired or did not come from this page. Please try again.")
		return
	}
	password := r.PostFormValue("password")
	if user == "" || password == "" {
		fail(http.StatusUnprocessableEntity, "Enter your user name and password.")
		return
	}
	route := "POST " + Prefix + "signin/ldap"
	if err := d.opt.API.PasswordLimited(r, route); err != nil {
		fail(d.tooMany(err))
		return
	}
	res, err := d.opt.LDAP.Authenticate(r.Context(), user, password)
	switch {
	case errors.Is(err, identity.ErrInvalidCredentials):
		d.auditSignInFailure(r, "ldap", user, "invalid user name or password")
		if lerr := d.opt.API.PasswordRefused(r, route); d.failure(lerr, "sign-in").Status == http.StatusTooManyRequests {
			fail(d.tooMany(lerr))
			return
		}
		fail(http.StatusUnauthorized, "Wrong user name or password.")
		return
	case errors.Is(err, identity.ErrThrottled):
		d.auditSignInFailure(r, "ldap", user, "throttled")
		fail(http.StatusTooManyRequests, "Too many failed sign-ins for this user name; wait a minute and try again.")
		return
	case errors.Is(err, identity.ErrBusy):
		fail(http.StatusServiceUnavailable, "Too many sign-ins are in progress; try again in a moment.")
		return
	case err != nil:
		d.opt.Log.Warn("dashboard: directory sign-in failed", "err", err)
		fail(http.StatusServiceUnavailable, "The directory (LDAP) did not answer; try again shortly.")
		return
	}
	if status, msg := d.personSignIn(w, r, res); status != 0 {
		fail(status, msg)
		return
	}
	http.SetCookie(w, d.cookie(r, signinCookie, "", Prefix+"signin", -1))
	http.Redirect(w, r, safeNext(r.PostFormValue("next")), http.StatusSeeOther)
}

// tooMany is a refusal of the client's failure limiter as a page's status
// and sentence.
func (d *Dashboard) tooMany(err error) (int, string) {
	f := d.failure(err, "sign-in")
	if f.Status == http.StatusTooManyRequests {
		return f.Status, fmt.Sprintf("Too many failed sign-ins from this address; wait %d s and try again.", f.RetryAfterSeconds)
	}
	return f.Status, "Signing in failed: " + f.Detail
}

// personSignIn records a provider's sign-in, makes the person's session
// token and opens the session; on a refusal it returns the status and
// sentence to show (and nothing was opened).
func (d *Dashboard) personSignIn(w http.ResponseWriter, r *http.Request, res identity.Result) (int, string) {
	if d.opt.People == nil {
		return http.StatusServiceUnavailable, "People cannot sign in here: this dashboard has no person store."
	}
	now := d.opt.Now().UTC()
	peer := auth.PeerKey(r.RemoteAddr)
	person, who, err := d.opt.People.SignIn(r.Context(), res, peer, now)
	switch {
	case errors.Is(err, identity.ErrDisabled):
		return http.StatusForbidden, "Your account is disabled on this orchestrator. Ask an administrator to enable it."
	case errors.Is(err, identity.ErrNoRole):
		return http.StatusForbidden, "You signed in, but none of your groups is given a role here, so there is nothing you could see. " +
			"Ask an administrator to map one of your groups ([[auth.groups]]) or to give you a role."
	case err != nil:
		d.opt.Log.Error("dashboard: recording a sign-in failed", "err", err)
		return http.StatusServiceUnavailable, "Could not record the sign-in; try again shortly."
	}
	expires := now.Add(PersonSessionMaxAge)
	tok := store.AdminToken{ID: protocol.NewTokenID(), Name: sessionTokenName, Scopes: who.Scopes, Team: who.Team,
		Hash: auth.Hash(auth.NewAdminToken()), PersonID: person.ID, CreatedAt: now, ExpiresAt: &expires}
	err = d.opt.Sessions.CreateAdminToken(r.Context(), tok, nil)
	if errors.Is(err, store.ErrPersonDisabled) {
		return http.StatusForbidden, "Your account is disabled on this orchestrator. Ask an administrator to enable it."
	}
	if err != nil {
		d.opt.Log.Error("dashboard: creating a session token failed", "err", err)
		return http.StatusServiceUnavailable, "Could not start a session; try again shortly."
	}
	who.TokenID = tok.ID
	if err := d.startSession(w, r, who, map[string]string{"name": who.Name, "provider": res.Provider}); err != nil {
		return http.StatusServiceUnavailable, "Could not start a session; try again shortly."
	}
	return 0, ""
}

// auditSignInFailure records a sign-in refused before anyone was known
// (a wrong password, a provider's refusal); refusals of a known person are
// audited where the sign-in is recorded.
func (d *Dashboard) auditSignInFailure(r *http.Request, provider, user, reason string) {
	// The reason may carry the provider's own words: keep them short.
	detail := map[string]string{"provider": provider, "reason": clip(reason, 256)}
	if user != "" {
		detail["username"] = clip(user, 128)
	}
	rec := audit.New("anonymous", auth.PeerKey(r.RemoteAddr), "auth.sign_in", "person", "", audit.Failure, detail)
	if err := d.opt.Sessions.AppendAudit(r.Context(), rec); err != nil {
		d.opt.Log.Warn("audit write failed", "action", "auth.sign_in", "err", err)
	}
}

// clip keeps at most n bytes of s, cut at a character boundary.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
