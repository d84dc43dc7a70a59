package dashboard

import (
	"context"
	"html"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/audit"
	"github.com/simpletuner/simpletuner-orchestration/internal/auth"
	"github.com/simpletuner/simpletuner-orchestration/internal/config"
	"github.com/simpletuner/simpletuner-orchestration/internal/identity"
	"github.com/simpletuner/simpletuner-orchestration/internal/identity/ldap"
	"github.com/simpletuner/simpletuner-orchestration/internal/identity/oidc"
	"github.com/simpletuner/simpletuner-orchestration/internal/oidctest"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator/fairshare"
	"github.com/simpletuner/simpletuner-orchestration/internal/slapdtest"
	"github.com/simpletuner/simpletuner-orchestration/internal/store"
)

// lateOIDC gives the dashboard its provider once the site's address, and
// so the redirect URI the provider must know, exists.
type lateOIDC struct{ p atomic.Pointer[oidc.Provider] }

func (l *lateOIDC) Begin(ctx context.Context, returnTo string) (string, error) {
	return l.p.Load().Begin(ctx, returnTo)
}

func (l *lateOIDC) Callback(ctx context.Context, q url.Values) (identity.Result, string, error) {
	return l.p.Load().Callback(ctx, q)
}

// storeSignIns records sign-ins as orchestratord does (identity.Resolver).
type storeSignIns struct {
	st store.Store
	r  identity.Resolver
}

func (s storeSignIns) SignIn(ctx context.Context, res identity.Result, peer string, now time.Time) (store.Person, auth.Principal, error) {
	return s.r.SignIn(ctx, s.st, res, peer, now)
}

// peopleSite is a site whose people sign in with a real OpenID provider
// (and, when asked, a real slapd): the group ml-team (OIDC) and the
// directory group trainers make a member of team alpha.
type peopleSite struct {
	*site
	op  *oidctest.Server
	dir *slapdtest.Server
}

// People of the test provider: alice is in ml-team; nobody's groups map
// to no role.
var nobody = oidctest.User{Subject: "u-nobody-0002", Username: "nobody", Password: "nobody-password",
	Email: "nobody@example.com", Name: "No Body", Groups: []string{"visitors"}}

func newPeopleSite(t *testing.T, st store.Store, withLDAP bool) *peopleSite {
	t.Helper()
	ps := &peopleSite{}
	groups := []config.GroupMapping{{Group: "ml-team", Team: "alpha", Role: "member"}}
	var dir LDAP
	if withLDAP {
		ps.dir = slapdtest.Start(t)
		ada := ps.dir.AddUser(t, "ada", "analytical engine", "Ada Lovelace", "ada@example.test")
		groups = append(groups, config.GroupMapping{Group: ps.dir.AddGroup(t, "trainers", ada), Team: "alpha", Role: "lead"})
		c := config.DefaultOrchestrator().Auth.LDAP
		c.URL, c.CAFile, c.BaseDN = ps.dir.URL, ps.dir.CAFile, ps.dir.BaseDN
		c.BindDN, c.BindPassword = ps.dir.BindDN, config.Secret(ps.dir.BindPassword)
		a, err := ldap.New(c)
		if err != nil {
			t.Fatal(err)
		}
		dir = a
	}
	late := &lateOIDC{}
	ps.site = newSiteWith(t, st, func(o *Options) {
		o.OIDC, o.OIDCName, o.LDAP = late, "Test IdP", dir
		o.People = storeSignIns{st: st, r: identity.Resolver{People: st, Groups: func() []config.GroupMapping { return groups }}}
	}, func(o *orchestrator.Options) {
		cfg := config.DefaultOrchestrator()
		cfg.Teams = []config.TeamConfig{{Name: "alpha", Share: 1}, {Name: "bravo", Share: 1}}
		o.Teams = fairshare.PolicyFrom(cfg)
		o.Groups = groups
	})
	redirect := ps.hs.URL + config.OIDCCallbackPath
	ps.op = oidctest.Start(t, oidctest.Options{
		Clients: []oidctest.Client{{ID: oidctest.ClientID, Secret: oidctest.ClientSecret, RedirectURIs: []string{redirect}}},
		Users:   []oidctest.User{oidctest.Alice, nobody}})
	p, err := oidc.New(oidc.Config{Issuer: ps.op.URL, ClientID: oidctest.ClientID, ClientSecret: oidctest.ClientSecret,
		RedirectURL: redirect, Scopes: []string{"openid", "profile", "email", "groups"}}, st)
	if err != nil {
		t.Fatal(err)
	}
	late.p.Store(p)
	return ps
}

var ssoLink = regexp.MustCompile(`id="sso" href="([^"]+)"`)

// startSSO follows the sign-in page's link and returns the provider's
// address the dashboard sent the browser to.
func (b *browser) startSSO(next string) string {
	b.t.Helper()
	p := b.must(b.get("/ui/signin?next="+url.QueryEscape(next)), 200)
	contains(b.t, p, "Sign in with Test IdP")
	m := ssoLink.FindStringSubmatch(p.Body)
	if m == nil {
		b.t.Fatalf("no single sign-on link:\n%s", p.Body)
	}
	start := b.get(html.UnescapeString(m[1]))
	if start.Status != http.StatusSeeOther || !strings.Contains(start.Location(), "/authorize?") {
		b.t.Fatalf("start: %d %q %s", start.Status, start.Location(), start.Body)
	}
	return start.Location()
}

// callback brings the browser back from the provider.
func (b *browser) callback(back *url.URL) page {
	b.t.Helper()
	return b.get(back.RequestURI())
}

// sso signs in at the provider as user and comes back.
func (ps *peopleSite) sso(b *browser, next, user, password string) page {
	ps.t.Helper()
	back, err := ps.op.SignIn(context.Background(), b.startSSO(next), user, password)
	if err != nil {
		ps.t.Fatal(err)
	}
	return b.callback(back)
}

// auditActions are the actions and outcomes of the audit log, oldest first.
func auditActions(t *testing.T, st store.Store, action string) []audit.Record {
	t.Helper()
	recs, err := st.ListAuditNewest(context.Background(), store.AuditFilter{Action: action, Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	return recs
}

// sessionTokens are the person's session tokens, revoked or live.
func sessionTokens(t *testing.T, st store.Store, personID string, revoked bool) []store.AdminToken {
	t.Helper()
	all, err := st.ListAdminTokens(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var out []store.AdminToken
	for _, tk := range all {
		if tk.PersonID == personID && tk.Name == sessionTokenName && (tk.RevokedAt != nil) == revoked {
			out = append(out, tk)
		}
	}
	return out
}

// A person signs in with single sign-on: the callback answers a page that
// moves on by itself, the session is the person (name and role in the
// header) and sees only their team's jobs; disabled by an admin, their
// next page load lands on the sign-in page and signing in again is refused.
// A person's session lasts PersonSessionMaxAge however busy: its token
// expires, and the next page asks them to sign in again.
func TestSingleSignOnSessionHasAnEnd(t *testing.T) {
	t.Parallel()
	ps := newPeopleSite(t, openSQLite(t), false)
	b := ps.browser()
	b.must(ps.sso(b, "/ui/queue", "alice", "alice-password"), 200)
	const step = 20 * time.Minute // within the idle timeout
	for elapsed := step; elapsed < PersonSessionMaxAge; elapsed += step {
		ps.clock.Advance(step)
		b.must(b.get("/ui/queue"), 200)
	}
	ps.clock.Advance(step)
	if p := b.get("/ui/queue"); p.Status != http.StatusSeeOther || !strings.HasPrefix(p.Location(), "/ui/signin?") {
		t.Fatalf("after %s: %d %q", PersonSessionMaxAge, p.Status, p.Location())
	}
}

func TestSingleSignOn(t *testing.T) {
	t.Parallel()
	for _, engine := range []string{"sqlite", "postgres"} {
		t.Run(engine, func(t *testing.T) {
			t.Parallel()
			var st store.Store
			if engine == "sqlite" {
				st = openSQLite(t)
			} else {
				st = openPostgres(t, pgURL(t))
			}
			ps := newPeopleSite(t, st, false)
			submit := func(team string) string {
				_, m := ps.adminAPI("POST", "/api/admin/tokens", map[string]any{"name": team, "team": team, "scopes": []string{"*"}})
				_, j := ps.api("POST", "/api/queue/submit", "Authorization", "Bearer "+m["token"].(string), map[string]any{"config": map[string]any{"steps": 1}})
				return j["job_id"].(string)
			}
			ours, theirs := submit("alpha"), submit("bravo")

			b := ps.browser()
			done := ps.sso(b, "/ui/queue", "alice", "alice-password")
			b.must(done, 200)
			contains(t, done, `<meta http-equiv="refresh" content="0;url=/ui/queue">`, `href="/ui/queue"`)
			q := b.must(b.get("/ui/queue"), 200)
			contains(t, q, "Signed in as <strong>Alice Liddell</strong>", "member in alpha", ours)
			lacks(t, q, theirs)

			tokens, err := st.ListAdminTokens(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			var personID string
			for _, tk := range tokens {
				if tk.Name == sessionTokenName {
					personID = tk.PersonID
				}
			}
			if !strings.HasPrefix(personID, "p_") {
				t.Fatalf("no session token of a person among %+v", tokens)
			}
			if recs := auditActions(t, st, "auth.sign_in"); len(recs) != 1 || recs[0].Outcome != audit.Success || recs[0].TargetID != personID {
				t.Fatalf("sign-in audit: %+v", recs)
			}

			// Signing out ends the session's own token; signing in again makes a new one.
			b.must(b.post("/ui/signout", nil), http.StatusSeeOther)
			if revoked := sessionTokens(t, st, personID, true); len(revoked) != 1 {
				t.Fatalf("revoked session tokens after sign-out: %+v", revoked)
			}
			b.must(ps.sso(b, "/ui/queue", "alice", "alice-password"), 200)
			if live := sessionTokens(t, st, personID, false); len(live) != 1 {
				t.Fatalf("live session tokens after signing in again: %+v", live)
			}

			// Disabled through the API: the next page load asks to sign in again.
			if status, m := ps.adminAPI("POST", "/api/admin/people/"+personID+"/disable", nil); status != 200 {
				t.Fatalf("disable: %d %v", status, m)
			}
			gone := b.get("/ui/queue")
			if gone.Status != http.StatusSeeOther || !strings.HasPrefix(gone.Location(), "/ui/signin?") {
				t.Fatalf("a disabled person's page: %d %q", gone.Status, gone.Location())
			}
			again := ps.sso(b, "/ui/queue", "alice", "alice-password")
			b.must(again, http.StatusForbidden)
			contains(t, again, "Your account is disabled")
			b.must(b.get("/ui/queue"), http.StatusSeeOther)
		})
	}
}

// Every way a single sign-on can fail shows the sign-in page with a
// sentence and opens no session.
func TestSingleSignOnRefusals(t *testing.T) {
	t.Parallel()
	st := openSQLite(t)
	ps := newPeopleSite(t, st, false)
	noSession := func(b *browser) {
		t.Helper()
		b.must(b.get("/ui/"), http.StatusSeeOther)
	}

	t.Run("another browser's sign-in", func(t *testing.T) {
		back, err := ps.op.SignIn(context.Background(), ps.browser().startSSO("/ui/"), "alice", "alice-password")
		if err != nil {
			t.Fatal(err)
		}
		b := ps.browser()
		p := b.must(b.callback(back), http.StatusBadRequest)
		contains(t, p, "not started in this browser")
		noSession(b)
	})

	t.Run("replayed", func(t *testing.T) {
		b := ps.browser()
		back, err := ps.op.SignIn(context.Background(), b.startSSO("/ui/"), "alice", "alice-password")
		if err != nil {
			t.Fatal(err)
		}
		b.must(b.callback(back), 200)
		// A second browser replays the same answer, binding cookie and all.
		other := ps.browser()
		u, _ := url.Parse(ps.hs.URL + oidcPath)
		other.c.Jar.SetCookies(u, []*http.Cookie{{Name: oidcCookie, Value: back.Query().Get("state"), Path: oidcPath}})
		p := other.must(other.callback(back), http.StatusBadRequest)
		contains(t, p, "already used")
		noSession(other)
	})

	t.Run("denied at the provider", func(t *testing.T) {
		b := ps.browser()
		back, err := ps.op.Deny(context.Background(), b.startSSO("/ui/"))
		if err != nil {
			t.Fatal(err)
		}
		if back.Query().Get("error") != "access_denied" {
			t.Fatalf("the provider answered %s", back)
		}
		p := b.must(b.callback(back), http.StatusForbidden)
		contains(t, p, "The identity provider did not sign you in", "access_denied")
		noSession(b)
	})

	t.Run("no role", func(t *testing.T) {
		b := ps.browser()
		p := b.must(ps.sso(b, "/ui/", "nobody", "nobody-password"), http.StatusForbidden)
		contains(t, p, "none of your groups is given a role")
		noSession(b)
	})

	t.Run("provider down at the callback", func(t *testing.T) {
		b := ps.browser()
		back, err := ps.op.SignIn(context.Background(), b.startSSO("/ui/"), "alice", "alice-password")
		if err != nil {
			t.Fatal(err)
		}
		ps.op.SetDown(true)
		defer ps.op.SetDown(false)
		p := b.must(b.callback(back), http.StatusServiceUnavailable)
		contains(t, p, "The identity provider did not answer")
		noSession(b)
	})

	var failures int
	for _, r := range auditActions(t, st, "auth.sign_in") {
		if r.Outcome == audit.Failure {
			failures++
		}
	}
	if failures < 4 {
		t.Fatalf("%d failed sign-ins audited, want one each for the browser, replay, denial, the provider down and no role", failures)
	}
}

// A provider that is down when a sign-in starts: 503 and the sign-in page.
func TestSingleSignOnProviderDownAtStart(t *testing.T) {
	t.Parallel()
	ps := newPeopleSite(t, openSQLite(t), false)
	ps.op.SetDown(true)
	b := ps.browser()
	p := b.get("/ui/auth/oidc/start?next=%2Fui%2Fqueue")
	b.must(p, http.StatusServiceUnavailable)
	contains(t, p, "The identity provider did not answer", `id="token"`)
	if c := p.Header.Get("Set-Cookie"); strings.Contains(c, oidcCookie) {
		t.Fatalf("a binding cookie was set for a sign-in that did not start: %s", c)
	}
}

// The link starts a sign-in at the provider and sets the binding cookie:
// the sign-in's state, short-lived, Lax (the provider's redirect back is
// cross-site), only for /ui/auth/.
func TestSingleSignOnStart(t *testing.T) {
	t.Parallel()
	ps := newPeopleSite(t, openSQLite(t), false)
	b := ps.browser()
	// As docs/auth.md shows it.
	p := b.must(b.get("/ui/auth/oidc/start?next=/ui/queue"), http.StatusSeeOther)
	to, err := url.Parse(p.Location())
	state := to.Query().Get("state")
	if err != nil || !strings.HasPrefix(p.Location(), ps.op.URL+"/authorize?") || state == "" {
		t.Fatalf("start sent the browser to %q", p.Location())
	}
	c := p.Header.Get("Set-Cookie")
	for _, want := range []string{oidcCookie + "=" + state, "Path=/ui/auth/", "Max-Age=600", "HttpOnly", "SameSite=Lax"} {
		if !strings.Contains(c, want) {
			t.Fatalf("binding cookie %q lacks %q", c, want)
		}
	}
}

var ldapFormToken = regexp.MustCompile(`id="ldap-signin">\s*<input type="hidden" name="form_token" value="([^"]+)"`)

// ldapSignIn posts the directory form of the sign-in page.
func (b *browser) ldapSignIn(user, password, next string) page {
	b.t.Helper()
	p := b.must(b.get("/ui/signin?next="+url.QueryEscape(next)), 200)
	m := ldapFormToken.FindStringSubmatch(p.Body)
	if m == nil {
		b.t.Fatalf("no directory form:\n%s", p.Body)
	}
	return b.post("/ui/signin/ldap", url.Values{"form_token": {m[1]}, "username": {user}, "password": {password}, "next": {next}})
}

// A person signs in with their directory password; a wrong one is refused
// and audited, counts toward the address's failures like a wrong token,
// and a form from elsewhere is refused before the directory is asked.
func TestLDAPSignIn(t *testing.T) {
	t.Parallel()
	st := openSQLite(t)
	ps := newPeopleSite(t, st, true)

	b := ps.browser()
	wrong := b.must(b.ldapSignIn("ada", "not her password", "/ui/queue"), http.StatusUnauthorized)
	contains(t, wrong, "Wrong user name or password", `value="ada"`)
	noSessionYet := b.get("/ui/")
	b.must(noSessionYet, http.StatusSeeOther)
	recs := auditActions(t, st, "auth.sign_in")
	if len(recs) != 1 || recs[0].Outcome != audit.Failure || !strings.Contains(string(recs[0].Details), `"username":"ada"`) {
		t.Fatalf("wrong password audit: %+v", recs)
	}

	ok := b.ldapSignIn("ada", "analytical engine", "/ui/queue")
	if ok.Status != http.StatusSeeOther || ok.Location() != "/ui/queue" {
		t.Fatalf("directory sign-in: %d %q %s", ok.Status, ok.Location(), ok.Body)
	}
	contains(t, b.must(b.get("/ui/queue"), 200), "Signed in as <strong>Ada Lovelace</strong>", "lead in alpha")

	// Refused before the directory: a form without this page's token.
	other := ps.browser()
	other.get("/ui/signin")
	p := other.post("/ui/signin/ldap", url.Values{"form_token": {"forged"}, "username": {"ada"}, "password": {"analytical engine"}})
	other.must(p, http.StatusForbidden)
	contains(t, p, "did not come from this page")
	other.must(other.get("/ui/"), http.StatusSeeOther)

	// Wrong passwords count per address: past the limit (5 a minute in
	// these sites) even the right one waits.
	c := ps.browser()
	for i := 0; ; i++ {
		p := c.ldapSignIn("nosuch"+string(rune('a'+i)), "guess", "/ui/")
		if p.Status == http.StatusTooManyRequests {
			break
		}
		if c.must(p, http.StatusUnauthorized); i == 5 {
			t.Fatal("six wrong passwords from one address were not refused")
		}
	}
	limited := c.ldapSignIn("ada", "analytical engine", "/ui/")
	c.must(limited, http.StatusTooManyRequests)
	contains(t, limited, "Too many failed sign-ins from this address")
	c.must(c.get("/ui/"), http.StatusSeeOther)
}

// Without [auth.oidc] and [auth.ldap] the sign-in page offers only the
// token form, and the people's routes say they are not set up.
func TestSignInPageWithoutProviders(t *testing.T) {
	t.Parallel()
	s := newSite(t, openSQLite(t))
	b := s.browser()
	p := b.must(b.get("/ui/signin"), 200)
	lacks(t, p, `id="sso"`, `id="ldap-signin"`)
	contains(t, b.must(b.get("/ui/auth/oidc/start"), http.StatusNotFound), "not set up")
	contains(t, b.must(b.get("/ui/auth/oidc/callback?state=x&code=y"), http.StatusNotFound), "not set up")
}
