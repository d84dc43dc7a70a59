package orchestrator

import (
	"context"

	"github.com/simpletuner/simpletuner-orchestration/internal/auth"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator/authn"
)

// WithPrincipal returns ctx carrying p as the authenticated caller of an API
// request that the dashboard constructs and serves through Handler() in
// process (see authn.WithPrincipal).
func WithPrincipal(ctx context.Context, p auth.Principal) context.Context {
	return authn.WithPrincipal(ctx, p)
}
