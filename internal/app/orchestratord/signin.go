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
	"github.com/simpletuner/simpletuner-orchestration/internal/store"
)

// signInProviders gives the dashboard the people's sign-ins that the
// configuration turns on: [auth.oidc] (single sign-on) and [auth.ldap]
// (directory user name and password). Nothing is asked of either
// provider here: an OpenID provider is discovered at the first sign-in,
// so one that is down delays only sign-ins.
//
// They are built once: a reload applies new [[auth.groups]] to every
// sign-in and session from then on (the groups are read at each sign-in
// and request), while a change of [auth.oidc] or [auth.ldap] itself takes
// a restart, which the reload warns about.
func (a *App) signInProviders(cfg *config.Orchestrator, st store.Store, opt *dashboard.Options) error {
	if !cfg.Auth.OIDC.Enabled() && !cfg.Auth.LDAP.Enabled() {
		return nil
	}
	opt.People = signIns{st: st, r: identity.Resolver{People: st, Groups: a.groups}}
	if cfg.Auth.OIDC.Enabled() {
		p, err := oidc.New(oidc.ConfigFrom(cfg), st)
		if err != nil {
			return fmt.Errorf("auth.oidc: %w", err)
		}
		opt.OIDC, opt.OIDCName = p, cfg.Auth.OIDC.DisplayName
	}
	if cfg.Auth.LDAP.Enabled() {
		l, err := ldap.New(cfg.Auth.LDAP)
		if err != nil {
			return err
		}
		opt.LDAP = l
	}
	return nil
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
	return []any{o.Issuer, o.ClientID, o.ClientSecret.Value(), o.Scopes, o.GroupsClaim, c.OIDCRedirectURL(), o.DisplayName}
}
