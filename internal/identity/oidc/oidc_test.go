package oidc_test

import (
	"errors"
	"net/url"
	"path/filepath"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/config"
	"github.com/simpletuner/simpletuner-orchestration/internal/identity"
	"github.com/simpletuner/simpletuner-orchestration/internal/identity/oidc"
	"github.com/simpletuner/simpletuner-orchestration/internal/oidctest"
	"github.com/simpletuner/simpletuner-orchestration/internal/store"
	"github.com/simpletuner/simpletuner-orchestration/internal/store/sqlite"
)

// clock is real time moved on by the test.
type clock struct{ offset atomic.Int64 }

func (c *clock) now() time.Time          { return time.Now().Add(time.Duration(c.offset.Load())) }
func (c *clock) advance(d time.Duration) { c.offset.Add(int64(d)) }

type rig struct {
	op    *oidctest.Server
	st    store.Store
	clock *clock
}

func newRig(t *testing.T, opts ...oidctest.Options) *rig {
	t.Helper()
	st, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "orchestrator.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return &rig{op: oidctest.Start(t, opts...), st: st, clock: &clock{}}
}

// provider is one orchestrator's view of the rig's provider.
func (r *rig) provider(t *testing.T) *oidc.Provider {
	t.Helper()
	p, err := oidc.New(oidc.Config{Issuer: r.op.URL, ClientID: oidctest.ClientID, ClientSecret: oidctest.ClientSecret,
		RedirectURL: oidctest.RedirectURI, Now: r.clock.now}, r.st)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// signIn begins a sign-in and has alice sign in at the provider; it
// returns the query the provider sent the browser back with.
func (r *rig) signIn(t *testing.T, p *oidc.Provider, returnTo string) url.Values {
	t.Helper()
	authURL, err := p.Begin(t.Context(), returnTo)
	if err != nil {
		t.Fatalf("Begin: %v", err)
	}
	back, err := r.op.SignIn(t.Context(), authURL, "alice", "alice-password")
	if err != nil {
		t.Fatalf("signing in at the provider: %v", err)
	}
	return back.Query()
}

var alice = identity.Result{Provider: "oidc", Subject: oidctest.Alice.Subject, Username: "alice", Email: "alice@example.com",
	Name: "Alice Liddell", Groups: []string{"ml-team", "gpu-admins"}}

func wantAlice(t *testing.T, r *rig, got identity.Result) {
	t.Helper()
	want := alice
	want.Issuer = r.op.URL
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("signed in as\n %+v\nwant\n %+v", got, want)
	}
}

// wantTokenError checks for a refused token whose reason says why, and
// that no code or state leaked into the message.
func wantTokenError(t *testing.T, err error, reason string, q url.Values) {
	t.Helper()
	var te *oidc.TokenError
	if !errors.As(err, &te) || !errors.Is(err, oidc.ErrTokenInvalid) {
		t.Fatalf("got %v, want a TokenError", err)
	}
	if !strings.Contains(te.Reason, reason) {
		t.Fatalf("reason %q does not say %q", te.Reason, reason)
	}
	noSecrets(t, err, q)
}

func noSecrets(t *testing.T, err error, q url.Values) {
	t.Helper()
	for _, k := range []string{"code", "state"} {
		if v := q.Get(k); v != "" && strings.Contains(err.Error(), v) {
			t.Fatalf("error %q holds the %s", err, k)
		}
	}
}

func TestCodeFlowWithPKCE(t *testing.T) {
	r := newRig(t)
	p := r.provider(t)
	authURL, err := p.Begin(t.Context(), "/ui/queue?status=running")
	if err != nil {
		t.Fatal(err)
	}
	u, _ := url.Parse(authURL)
	q := u.Query()
	for k, want := range map[string]string{"client_id": oidctest.ClientID, "redirect_uri": oidctest.RedirectURI,
		"response_type": "code", "code_challenge_method": "S256", "scope": "openid profile email"} {
		if q.Get(k) != want {
			t.Errorf("authorization URL %s = %q, want %q", k, q.Get(k), want)
		}
	}
	if q.Get("state") == "" || q.Get("nonce") == "" || q.Get("code_challenge") == "" {
		t.Fatalf("authorization URL lacks state, nonce or challenge: %s", authURL)
	}
	// The store keeps the state's hash, not the state.
	if _, err := r.st.TakeAuthFlow(t.Context(), q.Get("state"), r.clock.now()); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("flow found by the raw state: %v", err)
	}
	back, err := r.op.SignIn(t.Context(), authURL, "alice", "alice-password")
	if err != nil {
		t.Fatal(err)
	}
	res, returnTo, err := p.Callback(t.Context(), back.Query())
	if err != nil {
		t.Fatal(err)
	}
	wantAlice(t, r, res)
	if returnTo != "/ui/queue?status=running" {
		t.Fatalf("returnTo %q", returnTo)
	}
	memberships, _ := identity.Map(res.Groups, nil)
	if len(memberships) != 0 {
		t.Fatalf("no mappings, yet memberships %v", memberships)
	}
}

// Behind a load balancer the callback may reach another orchestrator.
func TestFinishOnAnotherOrchestrator(t *testing.T) {
	r := newRig(t)
	q := r.signIn(t, r.provider(t), "/ui/")
	res, returnTo, err := r.provider(t).Callback(t.Context(), q)
	if err != nil {
		t.Fatal(err)
	}
	wantAlice(t, r, res)
	if returnTo != "/ui/" {
		t.Fatalf("returnTo %q", returnTo)
	}
}

func TestReplayedState(t *testing.T) {
	r := newRig(t)
	p := r.provider(t)
	q := r.signIn(t, p, "/ui/")
	if _, _, err := p.Callback(t.Context(), q); err != nil {
		t.Fatal(err)
	}
	_, _, err := p.Callback(t.Context(), q)
	if !errors.Is(err, oidc.ErrState) {
		t.Fatalf("replayed callback: %v, want ErrState", err)
	}
	noSecrets(t, err, q)
}

func TestUnknownState(t *testing.T) {
	r := newRig(t)
	p := r.provider(t)
	for _, q := range []url.Values{
		{"state": {"never-issued"}, "code": {"abc"}},
		{"code": {"abc"}},
		{"state": {"never-issued"}, "error": {"access_denied"}},
	} {
		if _, _, err := p.Callback(t.Context(), q); !errors.Is(err, oidc.ErrState) {
			t.Errorf("callback %v: %v, want ErrState", q, err)
		}
	}
}

func TestExpiredFlow(t *testing.T) {
	r := newRig(t)
	p := r.provider(t)
	q := r.signIn(t, p, "/ui/")
	r.clock.advance(oidc.DefaultFlowTTL + time.Second)
	if _, _, err := p.Callback(t.Context(), q); !errors.Is(err, oidc.ErrState) {
		t.Fatalf("callback after the flow expired: %v, want ErrState", err)
	}
}

func TestWrongAudience(t *testing.T) {
	r := newRig(t)
	p := r.provider(t)
	r.op.IssueAs(oidctest.ClientID, "some-other-client")
	q := r.signIn(t, p, "/ui/")
	_, _, err := p.Callback(t.Context(), q)
	wantTokenError(t, err, "another client", q)
}

func TestForgedSignature(t *testing.T) {
	r := newRig(t)
	p := r.provider(t)
	if err := r.op.SignWithUnpublishedKey(true); err != nil {
		t.Fatal(err)
	}
	q := r.signIn(t, p, "/ui/")
	_, _, err := p.Callback(t.Context(), q)
	wantTokenError(t, err, "signature", q)
}

func TestExpiredIDToken(t *testing.T) {
	r := newRig(t)
	p := r.provider(t)
	r.op.SetIDTokenLifetime(-time.Hour)
	q := r.signIn(t, p, "/ui/")
	_, _, err := p.Callback(t.Context(), q)
	wantTokenError(t, err, "expired", q)
}

// A provider whose clock runs a little ahead is within the skew.
func TestClockSkewTolerated(t *testing.T) {
	r := newRig(t)
	p := r.provider(t)
	r.op.SetIDTokenLifetime(-oidc.DefaultClockSkew / 3)
	res, _, err := p.Callback(t.Context(), r.signIn(t, p, "/ui/"))
	if err != nil {
		t.Fatalf("token expired %s ago, within the skew: %v", oidc.DefaultClockSkew/3, err)
	}
	wantAlice(t, r, res)
}

func TestNonceMismatch(t *testing.T) {
	r := newRig(t)
	p := r.provider(t)
	other := "a-nonce-from-another-sign-in"
	r.op.SetNonce(&other)
	q := r.signIn(t, p, "/ui/")
	_, _, err := p.Callback(t.Context(), q)
	wantTokenError(t, err, "nonce", q)
}

// The provider rotates its signing key between two sign-ins: the second
// token names a key the verifier has not seen and still verifies.
func TestKeyRotation(t *testing.T) {
	r := newRig(t)
	p := r.provider(t)
	if _, _, err := p.Callback(t.Context(), r.signIn(t, p, "/ui/")); err != nil {
		t.Fatal(err)
	}
	if err := r.op.Rotate(); err != nil {
		t.Fatal(err)
	}
	res, _, err := p.Callback(t.Context(), r.signIn(t, p, "/ui/"))
	if err != nil {
		t.Fatalf("sign-in after the provider rotated its key: %v", err)
	}
	wantAlice(t, r, res)
}

// A provider that is down when the orchestrator starts fails sign-ins
// with ErrProviderUnavailable until it is back; a failed discovery is not
// retried within the retry interval.
func TestProviderDownAtStart(t *testing.T) {
	r := newRig(t)
	r.op.SetDown(true)
	p := r.provider(t) // does not contact the provider
	if _, err := p.Begin(t.Context(), "/ui/"); !errors.Is(err, oidc.ErrProviderUnavailable) {
		t.Fatalf("Begin with the provider down: %v", err)
	}
	r.op.SetDown(false)
	if _, err := p.Begin(t.Context(), "/ui/"); !errors.Is(err, oidc.ErrProviderUnavailable) {
		t.Fatalf("Begin within the retry interval: %v, want the remembered failure", err)
	}
	r.clock.advance(oidc.DefaultRetryInterval)
	res, _, err := p.Callback(t.Context(), r.signIn(t, p, "/ui/"))
	if err != nil {
		t.Fatalf("sign-in once the provider is back: %v", err)
	}
	wantAlice(t, r, res)
}

func TestProviderDownAtCallback(t *testing.T) {
	r := newRig(t)
	p := r.provider(t)
	q := r.signIn(t, p, "/ui/")
	r.op.SetDown(true)
	_, _, err := p.Callback(t.Context(), q)
	if !errors.Is(err, oidc.ErrProviderUnavailable) {
		t.Fatalf("callback with the token endpoint down: %v", err)
	}
	noSecrets(t, err, q)
}

// Keys that cannot be fetched are the provider being unavailable, not a
// bad signature.
func TestProviderKeysDown(t *testing.T) {
	r := newRig(t)
	p := r.provider(t)
	q := r.signIn(t, p, "/ui/")
	r.op.SetKeysDown(true)
	_, _, err := p.Callback(t.Context(), q)
	if !errors.Is(err, oidc.ErrProviderUnavailable) || errors.Is(err, oidc.ErrTokenInvalid) {
		t.Fatalf("callback with the provider's keys unreadable: %v, want ErrProviderUnavailable", err)
	}
	noSecrets(t, err, q)
}

func TestCodeRefused(t *testing.T) {
	r := newRig(t)
	p := r.provider(t)
	q := r.signIn(t, p, "/ui/")
	q.Set("code", "not-the-code-the-provider-gave")
	_, _, err := p.Callback(t.Context(), q)
	wantTokenError(t, err, "refused the code (invalid_grant)", q)
}

func TestDeniedByProvider(t *testing.T) {
	r := newRig(t)
	p := r.provider(t)
	authURL, err := p.Begin(t.Context(), "/ui/jobs")
	if err != nil {
		t.Fatal(err)
	}
	back, err := r.op.Deny(t.Context(), authURL)
	if err != nil {
		t.Fatal(err)
	}
	q := back.Query()
	if q.Get("error") != "access_denied" || q.Get("code") != "" {
		t.Fatalf("the provider sent back %s", back)
	}
	_, returnTo, err := p.Callback(t.Context(), q)
	var denied *oidc.DeniedError
	if !errors.As(err, &denied) || !errors.Is(err, oidc.ErrDenied) || denied.Code != "access_denied" {
		t.Fatalf("callback with error=access_denied: %v", err)
	}
	if returnTo != "/ui/jobs" {
		t.Fatalf("returnTo %q", returnTo)
	}
	if _, _, err := p.Callback(t.Context(), q); !errors.Is(err, oidc.ErrState) {
		t.Fatalf("a denied sign-in's state used again: %v, want ErrState", err)
	}
}

// A groups claim holding one string is one group.
func TestGroupsClaimSingleString(t *testing.T) {
	u := oidctest.Alice
	u.Groups, u.GroupString = []string{"ml-team"}, true
	r := newRig(t, oidctest.Options{Users: []oidctest.User{u}})
	p := r.provider(t)
	res, _, err := p.Callback(t.Context(), r.signIn(t, p, "/ui/"))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(res.Groups, []string{"ml-team"}) {
		t.Fatalf("groups %q", res.Groups)
	}
}

func TestNewRefusesIncompleteConfig(t *testing.T) {
	r := newRig(t)
	good := oidc.Config{Issuer: r.op.URL, ClientID: "c", RedirectURL: "https://o.example/cb"}
	for name, mod := range map[string]func(*oidc.Config){
		"no issuer":       func(c *oidc.Config) { c.Issuer = "" },
		"issuer not URL":  func(c *oidc.Config) { c.Issuer = "login.example.com" },
		"no client id":    func(c *oidc.Config) { c.ClientID = "" },
		"no redirect URL": func(c *oidc.Config) { c.RedirectURL = "" },
	} {
		c := good
		mod(&c)
		if _, err := oidc.New(c, r.st); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	if _, err := oidc.New(good, r.st); err != nil {
		t.Fatal(err)
	}
}

// [auth.oidc] as loaded becomes a Provider that signs people in, with the
// groups read from the configured claim and mapped by [[auth.groups]].
func TestConfigFromOrchestratorConfig(t *testing.T) {
	r := newRig(t)
	c := config.DefaultOrchestrator()
	c.Server.PublicURL = "http://127.0.0.1:1"
	c.Auth.OIDC.Issuer, c.Auth.OIDC.ClientID, c.Auth.OIDC.ClientSecret = r.op.URL, oidctest.ClientID, oidctest.ClientSecret
	c.Auth.Groups = []config.GroupMapping{{Group: "ML-Team", Team: "default", Role: "member"}}
	cfg := oidc.ConfigFrom(c)
	if cfg.RedirectURL != oidctest.RedirectURI {
		t.Fatalf("redirect URL %q, want %q", cfg.RedirectURL, oidctest.RedirectURI)
	}
	cfg.Now = r.clock.now
	p, err := oidc.New(cfg, r.st)
	if err != nil {
		t.Fatal(err)
	}
	res, _, err := p.Callback(t.Context(), r.signIn(t, p, "/ui/"))
	if err != nil {
		t.Fatal(err)
	}
	m, _ := identity.Map(res.Groups, c.Auth.Groups)
	if !reflect.DeepEqual(m, []identity.Membership{{Team: "default", Role: "member"}}) {
		t.Fatalf("memberships %+v", m)
	}
}
