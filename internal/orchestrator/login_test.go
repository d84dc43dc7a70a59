package orchestrator_test

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"golang.org/x/oauth2"

	"github.com/simpletuner/simpletuner-orchestration/internal/auth"
	"github.com/simpletuner/simpletuner-orchestration/internal/config"
	"github.com/simpletuner/simpletuner-orchestration/internal/identity/ldap"
	"github.com/simpletuner/simpletuner-orchestration/internal/identity/oidc"
	"github.com/simpletuner/simpletuner-orchestration/internal/oidctest"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator/adminapi"
	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
	"github.com/simpletuner/simpletuner-orchestration/internal/slapdtest"
	"github.com/simpletuner/simpletuner-orchestration/internal/store"
	"github.com/simpletuner/simpletuner-orchestration/internal/testutil"
)

// withLogin maps the test provider's group ml-team (Alice's) and the
// directory group trainers to member of nlp, and names the command line's
// client.
func withLogin(o *orchestrator.Options) {
	withPeople(o)
	o.Groups = append(o.Groups, config.GroupMapping{Group: "ml-team", Team: "nlp", Role: "member"})
	o.CLIClientID = oidctest.CLIClientID
}

// oidcProvider is the orchestrator's view of the test provider.
func oidcProvider(t *testing.T, op *oidctest.Server, st store.Store) *oidc.Provider {
	t.Helper()
	p, err := oidc.New(oidc.Config{Issuer: op.URL, ClientID: oidctest.ClientID, ClientSecret: oidctest.ClientSecret,
		RedirectURL: oidctest.RedirectURI}, st)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

type endpoints struct {
	Auth   string `json:"authorization_endpoint"`
	Token  string `json:"token_endpoint"`
	Device string `json:"device_authorization_endpoint"`
}

func discovery(t *testing.T, op *oidctest.Server) endpoints {
	t.Helper()
	resp, err := http.Get(op.URL + "/.well-known/openid-configuration")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var d endpoints
	if err := json.NewDecoder(resp.Body).Decode(&d); err != nil {
		t.Fatal(err)
	}
	return d
}

// deviceIDToken signs Alice in on the test provider by the device grant,
// as simpletunerctl login does, and returns the ID token it gets.
func deviceIDToken(t *testing.T, op *oidctest.Server) string {
	t.Helper()
	ctx := t.Context()
	d := discovery(t, op)
	cfg := oauth2.Config{ClientID: oidctest.CLIClientID, Endpoint: oauth2.Endpoint{TokenURL: d.Token, DeviceAuthURL: d.Device},
		Scopes: []string{"openid", "profile", "email"}}
	da, err := cfg.DeviceAuth(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := op.ApproveDevice(ctx, da.UserCode, "alice", "alice-password"); err != nil {
		t.Fatal(err)
	}
	tok, err := cfg.DeviceAccessToken(ctx, da)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := tok.Extra("id_token").(string)
	if raw == "" {
		t.Fatal("the device grant gave no ID token")
	}
	return raw
}

// codeIDToken signs Alice in by the code flow of the orchestrator's own
// client and returns the ID token issued to that client.
func codeIDToken(t *testing.T, op *oidctest.Server) string {
	t.Helper()
	d := discovery(t, op)
	cfg := oauth2.Config{ClientID: oidctest.ClientID, ClientSecret: oidctest.ClientSecret, RedirectURL: oidctest.RedirectURI,
		Endpoint: oauth2.Endpoint{AuthURL: d.Auth, TokenURL: d.Token}, Scopes: []string{"openid", "profile"}}
	verifier := oauth2.GenerateVerifier()
	back, err := op.SignIn(t.Context(), cfg.AuthCodeURL("state", oauth2.S256ChallengeOption(verifier)), "alice", "alice-password")
	if err != nil {
		t.Fatal(err)
	}
	tok, err := cfg.Exchange(t.Context(), back.Query().Get("code"), oauth2.VerifierOption(verifier))
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := tok.Extra("id_token").(string)
	return raw
}

func bearer(token string) map[string]string {
	return map[string]string{"Authorization": "Bearer " + token}
}

// An ID token from the command line's device sign-in is exchanged once for
// a login token that acts as the person (whoami names them, their team
// and role, and when the token expires); a forged, another client's, an
// expired and a replayed ID token are refused; logout revokes the token.
func TestOIDCExchange(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, open func(testing.TB) store.Store) {
		op := oidctest.Start(t)
		e := setup(t, open(t), withLogin)
		e.srv.SetSignInProviders(adminapi.SignInProviders{OIDC: oidcProvider(t, op, e.st)})

		providers := e.Must(e.Do("GET", "/api/auth/providers", nil, nil), 200).JSON
		if jsonText(providers) != `{"ldap":false,"oidc":{"client_id":"simpletunerctl","issuer":"`+op.URL+`","scopes":["openid","profile","email"]}}` {
			t.Fatalf("providers: %v", providers)
		}

		raw := deviceIDToken(t, op)
		login := e.Must(e.Do("POST", "/api/auth/oidc/exchange", nil, map[string]string{"id_token": raw}), 200).JSON
		token, _ := login["token"].(string)
		expires, err := time.Parse(time.RFC3339, login["expires_at"].(string))
		if !strings.HasPrefix(token, "sta_") || err != nil || time.Until(expires) < 11*time.Hour || time.Until(expires) > 12*time.Hour {
			t.Fatalf("login: %v", login)
		}
		if got := jsonText(login["memberships"]); got != `[{"role":"member","team":"nlp"}]` {
			t.Errorf("memberships %s", got)
		}
		who := e.Must(e.Do("GET", "/api/auth/whoami", bearer(token), nil), 200).JSON
		person, _ := who["person"].(map[string]any)
		if who["kind"] != auth.KindPerson || person["email"] != "alice@example.com" || person["name"] != "Alice Liddell" ||
			who["token_id"] != login["token_id"] || who["expires_at"] != login["expires_at"] ||
			jsonText(who["memberships"]) != `[{"role":"member","team":"nlp"}]` || who["team"] != "nlp" {
			t.Fatalf("whoami: %v", who)
		}

		// The same ID token again: refused, whichever orchestrator gets it.
		again := e.Must(e.Do("POST", "/api/auth/oidc/exchange", nil, map[string]string{"id_token": raw}), 401)
		if !strings.Contains(string(again.Body), "exchanged already") {
			t.Errorf("replay: %s", again.Body)
		}

		// Signed with a key the provider does not publish.
		if err := op.SignWithUnpublishedKey(true); err != nil {
			t.Fatal(err)
		}
		forged := e.Must(e.Do("POST", "/api/auth/oidc/exchange", nil, map[string]string{"id_token": deviceIDToken(t, op)}), 401)
		if !strings.Contains(string(forged.Body), "signature") {
			t.Errorf("forged: %s", forged.Body)
		}
		if err := op.SignWithUnpublishedKey(false); err != nil {
			t.Fatal(err)
		}
		// Issued to another client: the orchestrator's own (dashboard) client.
		other := e.Must(e.Do("POST", "/api/auth/oidc/exchange", nil, map[string]string{"id_token": codeIDToken(t, op)}), 401)
		if !strings.Contains(string(other.Body), "another client") {
			t.Errorf("other audience: %s", other.Body)
		}
		// Born expired.
		op.SetIDTokenLifetime(-time.Hour)
		expired := e.Must(e.Do("POST", "/api/auth/oidc/exchange", nil, map[string]string{"id_token": deviceIDToken(t, op)}), 401)
		if !strings.Contains(string(expired.Body), "expired") {
			t.Errorf("expired: %s", expired.Body)
		}
		e.Must(e.Do("POST", "/api/auth/oidc/exchange", nil, map[string]string{"id_token": "not.a.jwt"}), 401)
		e.Must(e.Do("POST", "/api/auth/oidc/exchange", nil, map[string]string{}), 422)

		// Logout: the token stops working at once.
		e.Must(e.Do("DELETE", "/api/auth/tokens/self", bearer(token), nil), 200)
		e.Must(e.Do("GET", "/api/auth/whoami", bearer(token), nil), 401)
	})
}

// Without cli_client_id the command line cannot sign in with OIDC.
func TestOIDCExchangeNotConfigured(t *testing.T) {
	t.Parallel()
	op := oidctest.Start(t)
	e := setup(t, storetestOpen(t), withPeople)
	e.srv.SetSignInProviders(adminapi.SignInProviders{OIDC: oidcProvider(t, op, e.st)})
	if got := e.Must(e.Do("GET", "/api/auth/providers", nil, nil), 200).JSON; jsonText(got) != `{"ldap":false,"oidc":null}` {
		t.Fatalf("providers: %v", got)
	}
	e.Must(e.Do("POST", "/api/auth/oidc/exchange", nil, map[string]string{"id_token": "x.y.z"}), 404)
	e.Must(e.Do("POST", "/api/auth/ldap/login", nil, map[string]string{"username": "a", "password": "b"}), 404)
}

func storetestOpen(t *testing.T) store.Store { return backends["sqlite"](t) }

// A directory login: the right password gets a login token acting as the
// person; a wrong one and a filter in the user name get the same 401, are
// counted, and past the limit the client gets 429.
func TestLDAPLogin(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, open func(testing.TB) store.Store) {
		s := slapdtest.Start(t)
		alice := s.AddUser(t, "alice", "wonder land", "Alice Liddell", "alice@example.test")
		group := s.AddGroup(t, "trainers", alice)
		c := config.DefaultOrchestrator().Auth.LDAP
		c.URL, c.CAFile, c.BaseDN = s.URL, s.CAFile, s.BaseDN
		c.BindDN, c.BindPassword = s.BindDN, config.Secret(s.BindPassword)
		dir, err := ldap.New(c)
		if err != nil {
			t.Fatal(err)
		}
		e := setup(t, open(t), withLogin, func(o *orchestrator.Options) {
			o.Groups = append(o.Groups, config.GroupMapping{Group: group, Team: "vision", Role: "lead"})
			o.AuthFailuresPerMinute = 3
		})
		e.srv.SetSignInProviders(adminapi.SignInProviders{LDAP: dir})
		if got := e.Must(e.Do("GET", "/api/auth/providers", nil, nil), 200).JSON; got["ldap"] != true {
			t.Fatalf("providers: %v", got)
		}

		login := e.Must(e.Do("POST", "/api/auth/ldap/login", nil, map[string]string{"username": "alice", "password": "wonder land"}), 200).JSON
		who := e.Must(e.Do("GET", "/api/auth/whoami", bearer(login["token"].(string)), nil), 200).JSON
		if person, _ := who["person"].(map[string]any); person["username"] != "alice" || person["provider"] != "ldap" ||
			jsonText(who["memberships"]) != `[{"role":"lead","team":"vision"}]` {
			t.Fatalf("whoami: %v", who)
		}

		for _, bad := range []map[string]string{
			{"username": "alice", "password": "wrong"},
			{"username": "*)(uid=*", "password": "wonder land"},
		} {
			r := e.Must(e.Do("POST", "/api/auth/ldap/login", nil, bad), 401)
			if !strings.Contains(string(r.Body), "invalid user name or password") || strings.Contains(string(r.Body), "wonder") {
				t.Errorf("%v: %s", bad, r.Body)
			}
		}
		// The third failure reaches the limit of three a minute.
		e.Must(e.Do("POST", "/api/auth/ldap/login", nil, map[string]string{"username": "alice", "password": "wrong"}), 429)
		// Over the limit, even the right password waits.
		e.Must(e.Do("POST", "/api/auth/ldap/login", nil, map[string]string{"username": "alice", "password": "wonder land"}), 429)

		// The failures are audited with the route, never the password. They
		// are gathered per audit interval, so they may be split over more
		// than one record, and the background flush may still be writing
		// some while the test flushes the rest: wait for all four (two
		// refused, one refused at the limit, one turned away over it).
		e.srv.Authn().FlushFailures(context.Background())
		var failures, signIns int
		testutil.Eventually(t, eventWait, "4 failures audited on the route", func() bool {
			recs, err := e.st.ListAudit(context.Background(), 0, 1000)
			if err != nil {
				t.Fatal(err)
			}
			failures, signIns = 0, 0
			for _, r := range recs {
				if strings.Contains(string(r.Details), "wonder") || strings.Contains(string(r.Details), "wrong") {
					t.Fatalf("an audit record holds a password: %s", r.Details)
				}
				switch {
				case r.Action == "auth.failure":
					var d struct{ Routes map[string]int }
					if err := json.Unmarshal(r.Details, &d); err != nil {
						t.Fatal(err)
					}
					failures += d.Routes["POST /api/auth/ldap/login"]
				case r.Action == "auth.sign_in" && r.Outcome == "success":
					signIns++
				}
			}
			return failures >= 4
		})
		if failures != 4 || signIns != 1 {
			t.Errorf("%d failures audited on the route (want 4), %d sign-ins (want 1)", failures, signIns)
		}
	})
}

// An expired token is refused with 401 token_expired, whose detail says
// when and what to run; it does not count toward the failure limit.
func TestExpiredTokenRefused(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, open func(testing.TB) store.Store) {
		e := setup(t, open(t), withPeople, func(o *orchestrator.Options) { o.AuthFailuresPerMinute = 2 })
		e.signedInPerson()
		ctx := context.Background()
		past := time.Now().Add(-time.Minute).UTC().Truncate(time.Second)
		token := auth.NewAdminToken()
		if err := e.st.CreateAdminToken(ctx, store.AdminToken{ID: protocol.NewTokenID(), Name: "login (oidc)", Scopes: []string{},
			Hash: auth.Hash(token), PersonID: docPersonID, CreatedAt: past.Add(-time.Hour), ExpiresAt: &past}, nil); err != nil {
			t.Fatal(err)
		}
		for range 3 {
			r := e.Must(e.Do("GET", "/api/auth/whoami", bearer(token), nil), 401)
			var body protocol.ErrorBody
			if err := json.Unmarshal(r.Body, &body); err != nil {
				t.Fatal(err)
			}
			if body.Error != protocol.CodeTokenExpired || body.Detail != "this token expired at "+past.Format(time.RFC3339)+"; run simpletunerctl login to get a new one" {
				t.Fatalf("expired token: %s", r.Body)
			}
		}
	})
}

// A person may create a token of their own, lasting at most
// personal_token_max_ttl, unless people_tokens = false; a service token
// may not.
func TestPersonalTokens(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, open func(testing.TB) store.Store) {
		e := setup(t, open(t), withPeople, func(o *orchestrator.Options) { o.PersonalTokenMaxTTL = 30 * 24 * time.Hour })
		person := bearer(e.signedInPerson())
		made := e.Must(e.Do("POST", "/api/auth/tokens", person, map[string]string{"name": "laptop", "expires_in": "7d"}), 201).JSON
		expires, err := time.Parse(time.RFC3339, made["expires_at"].(string))
		if err != nil || made["person_id"] != docPersonID || time.Until(expires) > 7*24*time.Hour || time.Until(expires) < 7*24*time.Hour-time.Hour {
			t.Fatalf("made: %v", made)
		}
		who := e.Must(e.Do("GET", "/api/auth/whoami", bearer(made["token"].(string)), nil), 200).JSON
		if who["kind"] != auth.KindPerson || who["id"] != docPersonID || who["expires_at"] != made["expires_at"] {
			t.Fatalf("whoami: %v", who)
		}
		long := e.Must(e.Do("POST", "/api/auth/tokens", person, map[string]string{"name": "x", "expires_in": "31d"}), 422)
		if !strings.Contains(string(long.Body), `field \"expires_in\"`) {
			t.Errorf("too long: %s", long.Body)
		}
		e.Must(e.Do("POST", "/api/auth/tokens", bearer(e.token("ci", "*")), map[string]string{"name": "x"}), 403)

		off := e.srv.Options()
		off.PeopleTokens = false
		e.srv.SetOptions(off)
		refused := e.Must(e.Do("POST", "/api/auth/tokens", person, map[string]string{"name": "laptop"}), 403)
		if !strings.Contains(string(refused.Body), "people_tokens = false") {
			t.Errorf("people_tokens off: %s", refused.Body)
		}
		// The token made before still works.
		e.Must(e.Do("GET", "/api/auth/whoami", bearer(made["token"].(string)), nil), 200)
	})
}

// authRequest is a request of the command line's sign-in that docs/auth.md
// shows: "METHOD /api/auth/…" and, on the next line, its JSON body.
var authRequest = regexp.MustCompile(`(?m)^(GET|POST|PUT|PATCH|DELETE) (/api/auth/\S*)\n(\{.*\}\n)?`)

// Every /api/auth request docs/auth.md shows runs as printed, with a
// person's token, and succeeds.
func TestLoginDocRequestsRun(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../../docs/auth.md")
	if err != nil {
		t.Fatal(err)
	}
	reqs := authRequest.FindAllStringSubmatch(string(b), -1)
	if len(reqs) < 1 {
		t.Fatal("docs/auth.md shows no /api/auth request; is the extraction broken?")
	}
	e := setup(t, backends["sqlite"](t), withPeople)
	person := bearer(e.signedInPerson())
	for _, r := range reqs {
		var body any
		if r[3] != "" {
			body = strings.TrimSpace(r[3])
		}
		if got := e.Do(r[1], r[2], person, body); got.Status/100 != 2 {
			t.Errorf("docs/auth.md: %s %s: HTTP %d: %s", r[1], r[2], got.Status, got.Body)
		}
	}
}

// A log follow opened with a token that expires ends within the re-check
// interval after it expires, and the token cannot open another.
func TestFollowEndsWhenTheTokenExpires(t *testing.T) {
	t.Parallel()
	e := setup(t, backends["sqlite"](t), func(o *orchestrator.Options) { o.RecheckInterval = 100 * time.Millisecond })
	_, id := e.startedJob()
	expires := time.Now().Add(3 * time.Second)
	token := auth.NewAdminToken()
	if err := e.st.CreateAdminToken(context.Background(), store.AdminToken{ID: protocol.NewTokenID(), Name: "viewer",
		Scopes: []string{auth.ScopeQueueView}, Hash: auth.Hash(token), CreatedAt: time.Now(), ExpiresAt: &expires}, nil); err != nil {
		t.Fatal(err)
	}
	f, status := e.follow(token, id)
	if status != 200 || f.ended(300*time.Millisecond) {
		t.Fatalf("the stream ended before the token expired (status %d)", status)
	}
	if !f.ended(eventWait) {
		t.Fatal("the stream outlived its expired token")
	}
	if time.Now().Before(expires) {
		t.Fatal("the stream ended before the token expired")
	}
	if _, status := e.follow(token, id); status != 401 {
		t.Fatalf("a new follow with the expired token: %d", status)
	}
}
