package orchestratord

import (
	"fmt"

	"github.com/simpletuner/simpletuner-orchestration/internal/config"
	"github.com/simpletuner/simpletuner-orchestration/internal/identity/ldap"
	"github.com/simpletuner/simpletuner-orchestration/internal/identity/oidc"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator/adminapi"
	"github.com/simpletuner/simpletuner-orchestration/internal/store"
)

// signInProviders builds the identity providers [auth.oidc] and
// [auth.ldap] configure, for the API's sign-in routes. Neither is
// contacted here: a provider that is down delays only sign-ins.
func signInProviders(cfg *config.Orchestrator, flows store.AuthFlows) (adminapi.SignInProviders, error) {
	var out adminapi.SignInProviders
	if cfg.Auth.OIDC.Enabled() {
		p, err := oidc.New(oidc.ConfigFrom(cfg), flows)
		if err != nil {
			return out, fmt.Errorf("auth.oidc: %w", err)
		}
		out.OIDC = p
	}
	if cfg.Auth.LDAP.Enabled() {
		d, err := ldap.New(cfg.Auth.LDAP)
		if err != nil {
			return out, err
		}
		out.LDAP = d
	}
	return out, nil
}
