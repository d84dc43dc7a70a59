package oidc

import (
	"context"
	"fmt"
	"time"

	gooidc "github.com/coreos/go-oidc/v3/oidc"

	"github.com/simpletuner/simpletuner-orchestration/internal/identity"
)

// VerifyIDToken checks an ID token that a client of the provider other
// than this orchestrator obtained (simpletunerctl login, a public client):
// issued by the issuer to audience, not expired and signed with one of
// the provider's published keys. There is no nonce to check: the device
// grant has none, and the command line checks its own in the loopback
// flow. It returns who the token names and when it expires. Refusing a
// token presented twice is the caller's part.
func (p *Provider) VerifyIDToken(ctx context.Context, raw, audience string) (identity.Result, time.Time, error) {
	if audience == "" {
		return identity.Result{}, time.Time{}, &TokenError{Reason: "no client is configured for the command line (auth.oidc.cli_client_id)"}
	}
	op, err := p.discovered(ctx)
	if err != nil {
		return identity.Result{}, time.Time{}, err
	}
	v := op.Verifier(&gooidc.Config{ClientID: audience, Now: func() time.Time { return p.cfg.Now().Add(-p.cfg.ClockSkew) }})
	idt, err := v.Verify(p.ctx(ctx), raw)
	if err != nil {
		return identity.Result{}, time.Time{}, verifyError(err)
	}
	var claims map[string]any
	if err := idt.Claims(&claims); err != nil {
		return identity.Result{}, time.Time{}, &TokenError{Reason: "the ID token's claims do not parse", Err: err}
	}
	if azp, _ := claims["azp"].(string); len(idt.Audience) > 1 && azp != audience {
		return identity.Result{}, time.Time{}, &TokenError{Reason: fmt.Sprintf("the ID token was issued to %q (azp), not the command line's client", azp)}
	}
	if idt.Subject == "" {
		return identity.Result{}, time.Time{}, &TokenError{Reason: "the ID token names no subject"}
	}
	return p.result(idt, claims), idt.Expiry, nil
}
