// Package oidc signs people in with an OpenID Connect provider (Okta,
// Entra ID, Keycloak, …) by the authorization code flow with PKCE.
//
// Begin stores the sign-in in progress (state hash, nonce, PKCE verifier,
// where to go afterwards) where every orchestrator sharing the database
// sees it, and returns the provider's URL to send the browser to. Finish
// takes that sign-in once, redeems the code with the verifier, verifies
// the ID token with go-oidc (issuer, audience, expiry, signature against
// the provider's published keys, which are fetched again when a token
// names a key not seen yet) and checks the nonce. The provider is
// discovered on first use and again after a failure, so a provider that
// is down when the orchestrator starts delays only sign-ins.
//
// Nothing here logs; errors never hold a code or a token.
package oidc

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	gooidc "github.com/coreos/go-oidc/v3/oidc"
	"golang.org/x/oauth2"

	"github.com/simpletuner/simpletuner-orchestration/internal/auth"
	"github.com/simpletuner/simpletuner-orchestration/internal/config"
	"github.com/simpletuner/simpletuner-orchestration/internal/identity"
	"github.com/simpletuner/simpletuner-orchestration/internal/store"
)

// ProviderName is the AuthFlow.Provider and identity.Result.Provider of
// OIDC sign-ins.
const ProviderName = "oidc"

// Defaults for the zero values of Config.
const (
	DefaultFlowTTL       = 10 * time.Minute
	DefaultClockSkew     = 30 * time.Second
	DefaultRetryInterval = 10 * time.Second
	DefaultTimeout       = 10 * time.Second
	DefaultGroupsClaim   = "groups"
)

// DefaultScopes are asked for when Config.Scopes is empty.
var DefaultScopes = []string{gooidc.ScopeOpenID, "profile", "email"}

// Config is one provider and this orchestrator's registration with it.
type Config struct {
	Issuer       string
	ClientID     string
	ClientSecret string
	RedirectURL  string   // this orchestrator's callback, as registered with the provider
	Scopes       []string // "openid" is added when missing
	GroupsClaim  string   // dotted path of the groups claim in the ID token
	// FlowTTL is how long a person has between Begin and Finish.
	FlowTTL time.Duration
	// ClockSkew is how far the provider's clock may be ahead of ours when
	// the ID token's expiry is checked.
	ClockSkew time.Duration
	// RetryInterval is how long a failed discovery is remembered before
	// the provider is asked again.
	RetryInterval time.Duration
	// Timeout bounds each request to the provider.
	Timeout time.Duration
	// Now is the clock; nil is time.Now.
	Now func() time.Time
}

// Provider signs people in with one OpenID Provider.
type Provider struct {
	cfg    Config
	flows  store.AuthFlows
	client *http.Client

	mu       sync.Mutex
	op       *gooidc.Provider // nil until discovered
	failedAt time.Time        // when discovery last failed
	failure  error
}

// New checks the configuration; it does not contact the provider.
func New(cfg Config, flows store.AuthFlows) (*Provider, error) {
	u, err := url.Parse(cfg.Issuer)
	switch {
	case cfg.Issuer == "":
		return nil, errors.New("oidc: no issuer")
	case err != nil || u.Host == "" || (u.Scheme != "https" && u.Scheme != "http"):
		return nil, fmt.Errorf("oidc: issuer %q is not an http(s) URL", cfg.Issuer)
	case cfg.ClientID == "":
		return nil, errors.New("oidc: no client id")
	case cfg.RedirectURL == "":
		return nil, errors.New("oidc: no redirect URL")
	case flows == nil:
		return nil, errors.New("oidc: no store for sign-ins in progress")
	}
	if len(cfg.Scopes) == 0 {
		cfg.Scopes = DefaultScopes
	}
	if !slices.Contains(cfg.Scopes, gooidc.ScopeOpenID) {
		cfg.Scopes = append([]string{gooidc.ScopeOpenID}, cfg.Scopes...)
	}
	if cfg.GroupsClaim == "" {
		cfg.GroupsClaim = DefaultGroupsClaim
	}
	cfg.FlowTTL = orDefault(cfg.FlowTTL, DefaultFlowTTL)
	cfg.ClockSkew = orDefault(cfg.ClockSkew, DefaultClockSkew)
	cfg.RetryInterval = orDefault(cfg.RetryInterval, DefaultRetryInterval)
	cfg.Timeout = orDefault(cfg.Timeout, DefaultTimeout)
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Provider{cfg: cfg, flows: flows, client: &http.Client{Timeout: cfg.Timeout}}, nil
}

func orDefault(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
}

// Issuer is the provider's issuer URL as configured.
func (p *Provider) Issuer() string { return p.cfg.Issuer }

// ctx carries the HTTP client the libraries use for every request.
func (p *Provider) ctx(ctx context.Context) context.Context {
	return gooidc.ClientContext(ctx, p.client)
}

// discovered returns the provider's metadata, fetching it on first use
// and again once RetryInterval has passed since a failure.
func (p *Provider) discovered(ctx context.Context) (*gooidc.Provider, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.op != nil {
		return p.op, nil
	}
	if !p.failedAt.IsZero() && p.cfg.Now().Sub(p.failedAt) < p.cfg.RetryInterval {
		return nil, p.failure
	}
	// The key set keeps the context it was discovered with for later key
	// fetches: it must outlive this request.
	op, err := gooidc.NewProvider(p.ctx(context.WithoutCancel(ctx)), p.cfg.Issuer)
	if err != nil {
		p.failedAt, p.failure = p.cfg.Now(), fmt.Errorf("%w: discovery at %s: %v", ErrProviderUnavailable, p.cfg.Issuer, err)
		return nil, p.failure
	}
	p.op, p.failedAt, p.failure = op, time.Time{}, nil
	return op, nil
}

func (p *Provider) oauth(op *gooidc.Provider) *oauth2.Config {
	return &oauth2.Config{ClientID: p.cfg.ClientID, ClientSecret: p.cfg.ClientSecret, Endpoint: op.Endpoint(),
		RedirectURL: p.cfg.RedirectURL, Scopes: p.cfg.Scopes}
}

// Begin starts a sign-in: it stores a new state (by its hash), nonce and
// PKCE verifier with returnTo, and returns the URL to send the browser to.
func (p *Provider) Begin(ctx context.Context, returnTo string) (string, error) {
	op, err := p.discovered(ctx)
	if err != nil {
		return "", err
	}
	state, nonce := random(), random()
	verifier := oauth2.GenerateVerifier()
	now := p.cfg.Now()
	err = p.flows.PutAuthFlow(ctx, store.AuthFlow{StateHash: auth.Hash(state), Provider: ProviderName, Nonce: nonce,
		Verifier: verifier, ReturnTo: returnTo, CreatedAt: now, ExpiresAt: now.Add(p.cfg.FlowTTL)})
	if err != nil {
		return "", fmt.Errorf("oidc: storing the sign-in: %w", err)
	}
	return p.oauth(op).AuthCodeURL(state, gooidc.Nonce(nonce), oauth2.S256ChallengeOption(verifier)), nil
}

// random is 256 bits, URL-safe.
func random() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

// Callback finishes a sign-in from the query the provider sent the browser
// back with: code and state, or error (and error_description) and state.
func (p *Provider) Callback(ctx context.Context, query url.Values) (identity.Result, string, error) {
	if code := query.Get("error"); code != "" {
		flow, err := p.take(ctx, query.Get("state"))
		if err != nil {
			return identity.Result{}, "", err
		}
		return identity.Result{}, flow.ReturnTo, &DeniedError{Code: code, Description: query.Get("error_description")}
	}
	return p.Finish(ctx, query.Get("state"), query.Get("code"))
}

// Finish completes the sign-in state names: it takes the flow (once),
// redeems code with its verifier, verifies the ID token and returns who
// signed in and where they wanted to go.
func (p *Provider) Finish(ctx context.Context, state, code string) (identity.Result, string, error) {
	flow, err := p.take(ctx, state)
	if err != nil {
		return identity.Result{}, "", err
	}
	if code == "" {
		return identity.Result{}, flow.ReturnTo, &TokenError{Reason: "the provider sent no code"}
	}
	op, err := p.discovered(ctx)
	if err != nil {
		return identity.Result{}, flow.ReturnTo, err
	}
	tok, err := p.oauth(op).Exchange(p.ctx(ctx), code, oauth2.VerifierOption(flow.Verifier))
	if err != nil {
		return identity.Result{}, flow.ReturnTo, exchangeError(err)
	}
	raw, _ := tok.Extra("id_token").(string)
	if raw == "" {
		return identity.Result{}, flow.ReturnTo, &TokenError{Reason: "the token response holds no ID token (is the openid scope allowed?)"}
	}
	res, err := p.verify(ctx, op, raw, flow.Nonce)
	return res, flow.ReturnTo, err
}

// take removes the flow of state from the store; any miss is ErrState.
func (p *Provider) take(ctx context.Context, state string) (store.AuthFlow, error) {
	if state == "" {
		return store.AuthFlow{}, ErrState
	}
	flow, err := p.flows.TakeAuthFlow(ctx, auth.Hash(state), p.cfg.Now())
	switch {
	case errors.Is(err, store.ErrNotFound):
		return store.AuthFlow{}, ErrState
	case err != nil:
		return store.AuthFlow{}, fmt.Errorf("oidc: reading the sign-in: %w", err)
	case flow.Provider != ProviderName:
		return store.AuthFlow{}, ErrState
	}
	return flow, nil
}

// exchangeError sorts a failed code exchange: an answer with an OAuth
// error is the provider refusing the code; anything else (no answer, a
// server error) is the provider being unavailable.
func exchangeError(err error) error {
	var re *oauth2.RetrieveError
	if errors.As(err, &re) && re.Response != nil && re.Response.StatusCode < 500 {
		reason := "the provider refused the code"
		if re.ErrorCode != "" {
			reason += " (" + re.ErrorCode + ")"
		}
		return &TokenError{Reason: reason}
	}
	if errors.As(err, &re) && re.Response != nil {
		return fmt.Errorf("%w: token endpoint answered %s", ErrProviderUnavailable, re.Response.Status)
	}
	return fmt.Errorf("%w: token endpoint: %v", ErrProviderUnavailable, redactURLError(err))
}

// redactURLError drops the request URL from a transport error, which for
// some providers carries parameters.
func redactURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// verify checks the ID token and reads the person from it.
func (p *Provider) verify(ctx context.Context, op *gooidc.Provider, raw, nonce string) (identity.Result, error) {
	v := op.Verifier(&gooidc.Config{ClientID: p.cfg.ClientID, Now: func() time.Time { return p.cfg.Now().Add(-p.cfg.ClockSkew) }})
	idt, err := v.Verify(p.ctx(ctx), raw)
	if err != nil {
		return identity.Result{}, verifyError(err)
	}
	if subtle.ConstantTimeCompare([]byte(idt.Nonce), []byte(nonce)) != 1 {
		return identity.Result{}, &TokenError{Reason: "the ID token's nonce is not the one this sign-in asked for"}
	}
	var claims map[string]any
	if err := idt.Claims(&claims); err != nil {
		return identity.Result{}, &TokenError{Reason: "the ID token's claims do not parse", Err: err}
	}
	// With several audiences, the token must say it was issued to us.
	if azp, _ := claims["azp"].(string); len(idt.Audience) > 1 && azp != p.cfg.ClientID {
		return identity.Result{}, &TokenError{Reason: fmt.Sprintf("the ID token was issued to %q (azp), not this client", azp)}
	}
	if idt.Subject == "" {
		return identity.Result{}, &TokenError{Reason: "the ID token names no subject"}
	}
	return p.result(idt, claims), nil
}

// verifyError sorts a failed verification: keys that could not be read
// are the provider being unavailable, anything else a refused token.
func verifyError(err error) error {
	if strings.Contains(err.Error(), "fetching keys") {
		// go-oidc says so only in words: the keys could not be read.
		return fmt.Errorf("%w: reading its signing keys: %v", ErrProviderUnavailable, err)
	}
	return &TokenError{Reason: verifyReason(err), Err: err}
}

// result is the person a verified ID token names.
func (p *Provider) result(idt *gooidc.IDToken, claims map[string]any) identity.Result {
	return identity.Result{
		Provider: ProviderName,
		Issuer:   idt.Issuer,
		Subject:  idt.Subject,
		Username: str(claims["preferred_username"]),
		Email:    str(claims["email"]),
		Name:     str(claims["name"]),
		Groups:   identity.Claim(claims, p.cfg.GroupsClaim),
	}
}

func str(v any) string {
	s, _ := v.(string)
	return s
}

// verifyReason turns go-oidc's errors into a sentence for a person.
func verifyReason(err error) string {
	var expired *gooidc.TokenExpiredError
	if errors.As(err, &expired) {
		return "the ID token expired at " + expired.Expiry.UTC().Format(time.RFC3339)
	}
	msg := strings.TrimPrefix(err.Error(), "oidc: ")
	switch {
	case strings.Contains(msg, "expected audience"):
		return "the ID token is for another client: " + msg
	case strings.Contains(msg, "different provider"):
		return "the ID token is from another issuer: " + msg
	case strings.Contains(msg, "signature"):
		return "the ID token's signature does not verify with the provider's published keys"
	}
	return msg
}

// ConfigFrom is the Config that [auth.oidc] describes.
func ConfigFrom(c *config.Orchestrator) Config {
	d := c.Auth.OIDC
	return Config{Issuer: d.Issuer, ClientID: d.ClientID, ClientSecret: d.ClientSecret.Value(), RedirectURL: c.OIDCRedirectURL(),
		Scopes: d.Scopes, GroupsClaim: d.GroupsClaim}
}
