package adminapi

// Signing people in from the command line: which providers there are, an
// ID token from the OpenID provider or a directory password exchanged for
// a login token that lasts [auth] login_token_ttl, logging out, and a
// person's own longer-lived tokens.

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/julienschmidt/httprouter"

	"github.com/simpletuner/simpletuner-orchestration/internal/api"
	"github.com/simpletuner/simpletuner-orchestration/internal/audit"
	"github.com/simpletuner/simpletuner-orchestration/internal/auth"
	"github.com/simpletuner/simpletuner-orchestration/internal/config"
	"github.com/simpletuner/simpletuner-orchestration/internal/identity"
	"github.com/simpletuner/simpletuner-orchestration/internal/identity/ldap"
	"github.com/simpletuner/simpletuner-orchestration/internal/identity/oidc"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator/authn"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator/web"
	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
	"github.com/simpletuner/simpletuner-orchestration/internal/store"
)

// IDTokenVerifier checks an ID token the OpenID provider issued to another
// of its clients (oidc.Provider).
type IDTokenVerifier interface {
	Issuer() string
	VerifyIDToken(ctx context.Context, raw, audience string) (identity.Result, time.Time, error)
}

// PasswordChecker signs a person in with a directory user name and
// password (ldap.Authenticator).
type PasswordChecker interface {
	Authenticate(ctx context.Context, user, password string) (identity.Result, error)
}

// SignInProviders are the identity providers people sign in with; a nil
// one is not configured.
type SignInProviders struct {
	OIDC IDTokenVerifier
	LDAP PasswordChecker
}

// SignInStore is what signing in records: the person, the ID tokens
// already exchanged (as used auth flows) and the login token.
type SignInStore interface {
	RecordSignIn(ctx context.Context, p store.Person, rec func(p store.Person, created bool) *audit.Record) (store.Person, bool, error)
	PutAuthFlow(ctx context.Context, f store.AuthFlow) error
}

// SignInLimiter counts failed sign-ins with the failed tokens, per client
// (authn.Authenticator).
type SignInLimiter interface {
	SignInLimited(r *http.Request) error
	SignInFailed(r *http.Request, refusal error) error
}

// usedIDTokenFlow marks, in the auth flows, an ID token already exchanged.
const usedIDTokenFlow = "oidc-id-token-used"

// providersBox holds the providers, set once the daemon has built them.
type providersBox struct {
	p atomic.Pointer[SignInProviders]
}

// SetSignInProviders tells the API which providers people sign in with.
func (a *API) SetSignInProviders(p SignInProviders) { a.providers.p.Store(&p) }

func (a *API) signInProviders() SignInProviders {
	if p := a.providers.p.Load(); p != nil {
		return *p
	}
	return SignInProviders{}
}

func (a *API) signInRoutes() []web.Route {
	return []web.Route{
		web.NewRoute("GET", "/api/auth/providers", "", a.serveProviders),
		web.NewRoute("POST", "/api/auth/oidc/exchange", "", a.serveOIDCExchange),
		web.NewRoute("POST", "/api/auth/ldap/login", "", a.serveLDAPLogin),
		web.NewRoute("DELETE", "/api/auth/tokens/self", "", httpCall(a, scopeAnyCaller, http.StatusOK, noRequest, a.Logout)),
		web.NewRoute("POST", "/api/auth/tokens", "", httpCall(a, scopeAnyCaller, http.StatusCreated,
			jsonBody[api.CreatePersonalToken](a), a.CreatePersonalToken)),
	}
}

// Providers says how people may sign in; it needs no credential.
func (a *API) Providers() api.SignInProviders {
	p := a.signInProviders()
	out := api.SignInProviders{LDAP: p.LDAP != nil}
	if id := a.options().CLIClientID; p.OIDC != nil && id != "" {
		scopes := a.options().OIDCScopes
		if len(scopes) == 0 {
			scopes = oidc.DefaultScopes
		}
		out.OIDC = &api.OIDCProvider{Issuer: p.OIDC.Issuer(), ClientID: id, Scopes: scopes}
	}
	return out
}

func (a *API) serveProviders(w http.ResponseWriter, _ *http.Request, _ httprouter.Params) {
	web.WriteJSON(w, http.StatusOK, a.Providers())
}

func (a *API) serveOIDCExchange(w http.ResponseWriter, r *http.Request, _ httprouter.Params) {
	a.serveSignIn(w, r, func(ctx context.Context) (identity.Result, error) {
		var req api.OIDCExchange
		if err := a.readJSON(w, r, &req); err != nil {
			return identity.Result{}, err
		}
		return a.exchangeIDToken(ctx, r, strings.TrimSpace(req.IDToken))
	})
}

func (a *API) serveLDAPLogin(w http.ResponseWriter, r *http.Request, _ httprouter.Params) {
	a.serveSignIn(w, r, func(ctx context.Context) (identity.Result, error) {
		var req api.LDAPLogin
		if err := a.readJSON(w, r, &req); err != nil {
			return identity.Result{}, err
		}
		return a.checkPassword(ctx, r, req)
	})
}

// serveSignIn answers a sign-in: a client past the failure limit is
// refused before anyone is asked; verify says who the provider vouches
// for; the person gets a login token.
func (a *API) serveSignIn(w http.ResponseWriter, r *http.Request, verify func(context.Context) (identity.Result, error)) {
	login, err := a.signIn(r, verify)
	if err != nil {
		a.errors.Write(w, r, err)
		return
	}
	web.WriteJSON(w, http.StatusOK, login)
}

func (a *API) signIn(r *http.Request, verify func(context.Context) (identity.Result, error)) (api.Login, error) {
	if err := a.limiter().SignInLimited(r); err != nil {
		return api.Login{}, err
	}
	ctx := r.Context()
	res, err := verify(ctx)
	if err != nil {
		return api.Login{}, err
	}
	now := time.Now().UTC()
	ip := authn.PeerIP(r)
	resolver := identity.Resolver{People: a.store, Groups: func() []config.GroupMapping { return a.options().Groups }}
	p, principal, err := resolver.SignIn(ctx, a.store, res, ip, now)
	switch {
	case errors.Is(err, identity.ErrDisabled):
		return api.Login{}, web.Errorf(http.StatusForbidden, protocol.CodeForbidden, "you may not sign in: an admin disabled this person")
	case errors.Is(err, identity.ErrNoRole):
		return api.Login{}, web.Errorf(http.StatusForbidden, protocol.CodeForbidden, "you may not sign in: %v", identity.ErrNoRole)
	case err != nil:
		return api.Login{}, err
	}
	return a.issueLogin(ctx, p, principal, ip, now)
}

// issueLogin stores a login token for p, lasting login_token_ttl.
func (a *API) issueLogin(ctx context.Context, p store.Person, principal auth.Principal, ip string, now time.Time) (api.Login, error) {
	expires := now.Add(a.options().LoginTokenTTL)
	token := auth.NewAdminToken()
	t := store.AdminToken{ID: protocol.NewTokenID(), Name: "login (" + p.Provider + ")", Scopes: []string{}, Hash: auth.Hash(token),
		PersonID: p.ID, CreatedAt: now, ExpiresAt: &expires}
	rec := audit.New("person:"+p.ID, ip, "admin_token.create", "admin_token", t.ID, audit.Success,
		map[string]string{"kind": "login", "provider": p.Provider, "expires_at": protocol.Time(expires), "token": auth.Accessor(token)})
	if err := a.store.CreateAdminToken(ctx, t, &rec); errors.Is(err, store.ErrPersonDisabled) {
		return api.Login{}, web.Errorf(http.StatusForbidden, protocol.CodeForbidden, "you may not sign in: an admin disabled this person")
	} else if err != nil {
		return api.Login{}, err
	}
	return api.Login{Token: token, TokenID: t.ID, ExpiresAt: protocol.Time(expires), Person: personSummary(p),
		Memberships: membershipsOf(principal)}, nil
}

func (a *API) limiter() SignInLimiter {
	if l, ok := a.auth.(SignInLimiter); ok {
		return l
	}
	return noLimiter{}
}

// noLimiter stands in where the authenticator counts no failures (tests
// of the API alone).
type noLimiter struct{}

func (noLimiter) SignInLimited(*http.Request) error           { return nil }
func (noLimiter) SignInFailed(_ *http.Request, e error) error { return e }

// exchangeIDToken verifies an ID token issued to the command line's client
// and marks it used, so that it signs in once.
func (a *API) exchangeIDToken(ctx context.Context, r *http.Request, raw string) (identity.Result, error) {
	v, clientID := a.signInProviders().OIDC, a.options().CLIClientID
	if v == nil || clientID == "" {
		return identity.Result{}, web.NotFound("single sign-on from the command line is not configured here (auth.oidc.cli_client_id)")
	}
	if raw == "" {
		return identity.Result{}, web.Invalid("field \"id_token\" is required")
	}
	res, expiry, err := v.VerifyIDToken(ctx, raw, clientID)
	switch {
	case errors.Is(err, oidc.ErrProviderUnavailable):
		return identity.Result{}, web.Errorf(http.StatusServiceUnavailable, protocol.CodeUnavailable, "%v", err)
	case err != nil:
		return identity.Result{}, a.limiter().SignInFailed(r, web.Errorf(http.StatusUnauthorized, protocol.CodeUnauthorized, "%v", err))
	}
	now := time.Now().UTC()
	err = a.store.PutAuthFlow(ctx, store.AuthFlow{StateHash: auth.Hash("id_token:" + raw), Provider: usedIDTokenFlow,
		CreatedAt: now, ExpiresAt: expiry.Add(oidc.DefaultClockSkew)})
	switch {
	case errors.Is(err, store.ErrDuplicate):
		return identity.Result{}, a.limiter().SignInFailed(r, web.Errorf(http.StatusUnauthorized, protocol.CodeUnauthorized,
			"%v: this ID token was exchanged already; log in again", oidc.ErrTokenInvalid))
	case err != nil:
		return identity.Result{}, err
	}
	return res, nil
}

// checkPassword signs a person in against the directory.
func (a *API) checkPassword(ctx context.Context, r *http.Request, req api.LDAPLogin) (identity.Result, error) {
	dir := a.signInProviders().LDAP
	if dir == nil {
		return identity.Result{}, web.NotFound("directory sign-in is not configured here ([auth.ldap])")
	}
	res, err := dir.Authenticate(ctx, req.Username, req.Password)
	switch {
	case errors.Is(err, ldap.ErrInvalid):
		return identity.Result{}, a.limiter().SignInFailed(r, web.Errorf(http.StatusUnauthorized, protocol.CodeUnauthorized, "%v", err))
	case errors.Is(err, ldap.ErrThrottled):
		e := web.Errorf(http.StatusTooManyRequests, protocol.CodeRateLimited, "%v", err)
		e.RetryAfter = time.Minute
		return identity.Result{}, a.limiter().SignInFailed(r, e)
	case errors.Is(err, ldap.ErrBusy), errors.Is(err, ldap.ErrUnavailable):
		return identity.Result{}, web.Errorf(http.StatusServiceUnavailable, protocol.CodeUnavailable, "%v", err)
	}
	return res, err
}

// Logout revokes the token the caller presented.
func (a *API) Logout(ctx context.Context, _ struct{}) (api.Revoked, error) {
	c, err := authorize(ctx, scopeAnyCaller)
	if err != nil {
		return api.Revoked{}, err
	}
	if c.TokenID == "" {
		return api.Revoked{}, web.Invalid("this caller presented no token to revoke (the admin socket)")
	}
	rec := audit.New(c.Actor(), c.IP, "admin_token.revoke", "admin_token", c.TokenID, audit.Success, map[string]string{"by": "self"})
	if err := a.store.RevokeAdminToken(ctx, c.TokenID, &rec); err != nil {
		return api.Revoked{}, err
	}
	return api.Revoked{Success: true, ID: c.TokenID}, nil
}

// CreatePersonalToken gives a signed-in person a token of their own that
// acts as them, for at most personal_token_max_ttl.
func (a *API) CreatePersonalToken(ctx context.Context, req api.CreatePersonalToken) (api.PersonalToken, error) {
	c, err := authorize(ctx, scopeAnyCaller)
	if err != nil {
		return api.PersonalToken{}, err
	}
	opt := a.options()
	switch {
	case c.Kind != auth.KindPerson:
		return api.PersonalToken{}, web.Errorf(http.StatusForbidden, protocol.CodeForbidden,
			"only a signed-in person may create a personal token; service tokens are made with POST /api/admin/tokens")
	case !opt.PeopleTokens:
		return api.PersonalToken{}, web.Errorf(http.StatusForbidden, protocol.CodeForbidden,
			"an admin turned off personal tokens ([auth] people_tokens = false); use simpletunerctl login")
	}
	if strings.TrimSpace(req.Name) == "" {
		return api.PersonalToken{}, web.Invalid("field \"name\" is required")
	}
	if err := web.Printable("name", req.Name); err != nil {
		return api.PersonalToken{}, err
	}
	life, err := personalTokenLife(req.ExpiresIn, opt.PersonalTokenMaxTTL)
	if err != nil {
		return api.PersonalToken{}, err
	}
	now := time.Now().UTC()
	expires := now.Add(life)
	token := auth.NewAdminToken()
	t := store.AdminToken{ID: protocol.NewTokenID(), Name: strings.TrimSpace(req.Name), Scopes: []string{}, Hash: auth.Hash(token),
		PersonID: c.ID, CreatedAt: now, ExpiresAt: &expires}
	rec := audit.New(c.Actor(), c.IP, "admin_token.create", "admin_token", t.ID, audit.Success,
		map[string]string{"kind": "personal", "name": t.Name, "expires_at": protocol.Time(expires), "token": auth.Accessor(token)})
	if err := a.store.CreateAdminToken(ctx, t, &rec); err != nil {
		return api.PersonalToken{}, err
	}
	return api.PersonalToken{ID: t.ID, Name: t.Name, PersonID: c.ID, ExpiresAt: protocol.Time(expires), Token: token}, nil
}

// personalTokenLife reads expires_in: empty is the most allowed.
func personalTokenLife(in string, most time.Duration) (time.Duration, error) {
	if strings.TrimSpace(in) == "" {
		return most, nil
	}
	var d config.Duration
	if err := d.UnmarshalText([]byte(in)); err != nil || d.Duration <= 0 {
		return 0, web.Invalid("field \"expires_in\": %q is not a positive duration such as \"720h\" or \"30d\"", in)
	}
	if d.Duration > most {
		return 0, web.Invalid("field \"expires_in\": %s is longer than the %s allowed ([auth] personal_token_max_ttl)", in, most)
	}
	return d.Duration, nil
}

func personSummary(p store.Person) api.PersonSummary {
	return api.PersonSummary{ID: p.ID, Username: p.Username, Name: p.Name, Email: p.Email, Provider: p.Provider}
}

// membershipsOf is a person's roles as the API shows them.
func membershipsOf(p auth.Principal) []api.Membership {
	out := make([]api.Membership, 0, len(p.Memberships))
	for _, m := range p.Memberships {
		out = append(out, api.Membership{Team: m.Team, Role: m.Role.String()})
	}
	return out
}
