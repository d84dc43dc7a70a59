package browser

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/simpletuner/simpletuner-orchestration/internal/oidctest"
	"github.com/simpletuner/simpletuner-orchestration/internal/slapdtest"
	. "github.com/simpletuner/simpletuner-orchestration/test/e2e/e2etest"
)

// People sign in to the dashboard of a real orchestratord: with single
// sign-on at a real OpenID provider (its own login page, filled in by the
// browser) and with their password in a real slapd. A person sees only
// their team's jobs, and once an admin disables them through the API their
// next page load asks them to sign in.
func TestPeopleSignInInABrowser(t *testing.T) {
	chromiumPath(t)
	dir := slapdtest.Start(t)
	ada := dir.AddUser(t, "ada", "analytical engine", "Ada Lovelace", "ada@example.test")
	trainers := dir.AddGroup(t, "trainers", ada)
	op := oidctest.Start(t, oidctest.Options{
		Clients: []oidctest.Client{{ID: oidctest.ClientID, Secret: oidctest.ClientSecret}},
		Users:   []oidctest.User{oidctest.Alice}})

	secrets := t.TempDir()
	write := func(name, value string) string {
		p := filepath.Join(secrets, name)
		if err := os.WriteFile(p, []byte(value+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	o := StartOrchestratorWith(t, OrchOptions{PublicURL: true, ExtraTOML: fmt.Sprintf(`[[teams]]
name = "alpha"
share = 1
[[teams]]
name = "bravo"
share = 1
[auth.oidc]
issuer = %q
client_id = %q
client_secret_file = %q
display_name = "Example SSO"
[auth.ldap]
url = %q
ca_file = %q
bind_dn = %q
bind_password_file = %q
base_dn = %q
[[auth.groups]]
group = "ml-team"
team = "alpha"
role = "member"
[[auth.groups]]
group = %q
team = "alpha"
role = "lead"
`, op.URL, oidctest.ClientID, write("oidc-secret", oidctest.ClientSecret), dir.URL, dir.CAFile, dir.BindDN,
		write("ldap-password", dir.BindPassword), dir.BaseDN, trainers)})
	op.AllowRedirect(oidctest.ClientID, o.URL+"/ui/auth/oidc/callback")
	submit := func(team string) string {
		st, m := o.As(o.TeamToken(team)).Do("POST", "/api/queue/submit", map[string]any{"config": map[string]any{"steps": 1}})
		if st != 200 && st != 201 {
			t.Fatalf("submit for %s: %d %v", team, st, m)
		}
		return m["job_id"].(string)
	}
	ours, theirs := submit("alpha"), submit("bravo")

	// Single sign-on: the queue asks to sign in; the link goes to the
	// provider's login page, and back signed in on the queue.
	b := newTab(t, o.URL, 1280, 900)
	b.open("/ui/queue")
	b.run(chromedp.WaitVisible(css(`#sso`)))
	if got := b.text(`#sso`); got != "Sign in with Example SSO" {
		t.Fatalf("the single sign-on link reads %q", got)
	}
	b.shot("signin-sso")
	b.run(chromedp.Click(css(`#sso`)), chromedp.WaitVisible(css(`#username`)))
	if !strings.HasPrefix(b.eval(`location.href`), op.URL+"/login") {
		t.Fatalf("the link went to %s, not the provider's login page", b.eval(`location.href`))
	}
	b.run(chromedp.SendKeys(css(`#username`), "alice"), chromedp.SendKeys(css(`#password`), "alice-password"),
		chromedp.Click(css(`#submit`)), chromedp.WaitVisible(css(`#queue-live`)))
	if p := b.path(); p != "/ui/queue" {
		t.Fatalf("back from the provider at %s", p)
	}
	if name, roles := b.text(`form.signout strong`), b.text(`#signed-in-roles`); name != "Alice Liddell" || !strings.Contains(roles, "member in alpha") {
		t.Fatalf("header: %q %q", name, roles)
	}
	queue := b.text(`#queue-live`)
	if !strings.Contains(queue, ours) || strings.Contains(queue, theirs) {
		t.Fatalf("the queue of team alpha's member (job %s ours, %s theirs):\n%s", ours, theirs, queue)
	}

	// An admin disables her: her next page load is the sign-in page.
	st, people := o.Do("GET", "/api/admin/people", nil)
	list, _ := people["people"].([]any)
	if st != 200 || len(list) != 1 {
		t.Fatalf("people: %d %v", st, people)
	}
	id := list[0].(map[string]any)["id"].(string)
	if st, m := o.Do("POST", "/api/admin/people/"+id+"/disable", nil); st != 200 {
		t.Fatalf("disable: %d %v", st, m)
	}
	b.open("/ui/queue")
	b.run(chromedp.WaitVisible(css(`#token`)))
	if p := b.path(); !strings.HasPrefix(p, "/ui/signin?") {
		t.Fatalf("a disabled person's page load went to %s", p)
	}
	b.noProblems()

	// A directory account signs in with the form.
	d := newTab(t, o.URL, 1280, 900)
	d.open("/ui/signin")
	d.run(chromedp.SendKeys(css(`#username`), "ada"), chromedp.SendKeys(css(`#password`), "analytical engine"),
		chromedp.Submit(css(`#password`)), chromedp.WaitVisible(css(`form.signout strong`)))
	d.waitText(`form.signout strong`, "Ada Lovelace", 5*time.Second)
	d.waitText(`#signed-in-roles`, "lead in alpha", 5*time.Second)
	d.noProblems()
}
