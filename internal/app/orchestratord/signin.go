package orchestratord

import (
	"context"
	"fmt"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/auth"
	"github.com/simpletuner/simpletuner-orchestration/internal/config"
	"github.com/simpletuner/simpletuner-orchestration/internal/dashboard"
	"github.com/simpletuner/simpletuner-orchestration/internal/identity"
	"github.com/simpletuner/simpletuner-orchestration/internal/identity/ldap"
	"github.com/simpletuner/simpletuner-orchestration/internal/identity/oidc"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator/adminapi"
	"github.com/simpletuner/simpletuner-orchestration/internal/store"
)

// identityProviders are the people's sign-ins the configuration turns on:
// [auth.oidc] (single sign-on) and [auth.ldap] (directory user name and
// password). They are built once and shared by the dashboard and the API's
// command-line sign-in, so that the LDAP authenticator's per-name throttle
// and concurrency cap hold across both. Nothing is asked of either provider
// here: an OpenID provider is discovered at the first sign-in, so one that
// is down delays only sign-ins.
//
// A reload applies new [[auth.groups]] to every sign-in and session from
// then on (the groups are read at each sign-in and request), while a
// change of [auth.oidc] or [auth.ldap] itself takes a restart, which the
// reload warns about.
type identityProviders struct {
	oidc *oidc.Provider
	ldap *ldap.Authenticator
}

func newIdentityProviders(cfg *config.Orchestrator, flows store.AuthFlows) (identityProviders, error) {
	var out identityProviders
	if cfg.Auth.OIDC.Enabled() {
		p, err := oidc.New(oidc.ConfigFrom(cfg), flows)
		if err != nil {
			return out, fmt.Errorf("auth.oidc: %w", err)
		}
		out.oidc = p
	}
	if cfg.Auth.LDAP.Enabled() {
		l, err := ldap.New(cfg.Auth.LDAP)
		if err != nil {
			return out, err
		}
		out.ldap = l
	}
	return out, nil
}

// forAPI are the providers as the API's sign-in routes take them (a nil
// interface for one that is off).
func (p identityProviders) forAPI() adminapi.SignInProviders {
	var out adminapi.SignInProviders
	if p.oidc != nil {
		out.OIDC = p.oidc
	}
	if p.ldap != nil {
		out.LDAP = p.ldap
	}
	return out
}

// forDashboard gives the dashboard the sign-ins that are on.
func (a *App) forDashboard(p identityProviders, cfg *config.Orchestrator, st store.Store, opt *dashboard.Options) {
	if p.oidc == nil && p.ldap == nil {
		return
	}
	opt.People = signIns{st: st, r: identity.Resolver{People: st, Groups: a.groups}}
	if p.oidc != nil {
		opt.OIDC, opt.OIDCName = p.oidc, cfg.Auth.OIDC.DisplayName
	}
	if p.ldap != nil {
		opt.LDAP = p.ldap
	}
}

// groups are the [[auth.groups]] in force (they follow reloads).
func (a *App) groups() []config.GroupMapping {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.cfg.Auth.Groups
}

// signIns records sign-ins in the store (identity.Resolver.SignIn).
type signIns struct {
	st store.Store
	r  identity.Resolver
}

func (s signIns) SignIn(ctx context.Context, res identity.Result, peer string, now time.Time) (store.Person, auth.Principal, error) {
	return s.r.SignIn(ctx, s.st, res, peer, now)
}

// oidcWhat is what of [auth.oidc] needs a restart to change (all of it;
// the secret compared by value, never printed).
func oidcWhat(c *config.Orchestrator) any {
	o := c.Auth.OIDC
	return []any{o.Issuer, o.ClientID, o.ClientSecret.Value(), o.Scopes, o.GroupsClaim, c.OIDCRedirectURL(), o.DisplayName, o.CLIClientID}
}
