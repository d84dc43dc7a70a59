package orchestrator_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/auth"
	"github.com/simpletuner/simpletuner-orchestration/internal/config"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator/fairshare"
	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
	"github.com/simpletuner/simpletuner-orchestration/internal/store"
)

// docPersonID is the person the requests in docs/auth.md name.
const docPersonID = "p_4k2m9x7q1z3a"

// withPeople configures the teams nlp and vision and maps the group
// ml-eng to member of nlp.
func withPeople(o *orchestrator.Options) {
	cfg := config.DefaultOrchestrator()
	cfg.Teams = []config.TeamConfig{{Name: "nlp", Share: 1}, {Name: "vision", Share: 1}}
	o.Teams = fairshare.PolicyFrom(cfg)
	o.Groups = []config.GroupMapping{{Group: "ml-eng", Team: "nlp", Role: "member"}, {Group: "cv", Team: "vision", Role: "viewer"}}
}

// signedInPerson records a sign-in of the documentation's person and gives
// them a token and a dashboard session, as a sign-in would.
func (e *env) signedInPerson() (token string) {
	e.t.Helper()
	ctx := context.Background()
	_, _, err := e.st.RecordSignIn(ctx, store.Person{ID: docPersonID, Provider: "oidc", Issuer: "https://idp.example.com",
		Subject: "00u1ada", Username: "ada", Email: "ada@example.com", Name: "Ada", Groups: []string{"ml-eng", "cv"},
		LastSignIn: time.Now()}, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	token = auth.NewAdminToken()
	tok := store.AdminToken{ID: protocol.NewTokenID(), Name: "ada", Scopes: []string{auth.ScopeQueueView}, Hash: auth.Hash(token),
		PersonID: docPersonID, CreatedAt: time.Now()}
	if err := e.st.CreateAdminToken(ctx, tok, nil); err != nil {
		e.t.Fatal(err)
	}
	if err := e.st.CreateDashboardSession(ctx, store.DashboardSession{IDHash: "ada-session", TokenID: tok.ID}, nil); err != nil {
		e.t.Fatal(err)
	}
	return token
}

// The people calls over HTTP: a token holding admin.people lists, shows,
// overrides, disables and enables a person; a disabled person's token is
// refused on its next request and their session is gone; a wrong
// membership changes nothing.
func TestPeopleAPI(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, open func(testing.TB) store.Store) {
		e := setup(t, open(t), withPeople)
		person := e.signedInPerson()
		as := func(token string) map[string]string { return map[string]string{"Authorization": "Bearer " + token} }
		people := e.token("people-admin", auth.ScopeAdminPeople)
		e.Must(e.Do("GET", "/api/auth/whoami", as(person), nil), 200)

		// Another admin scope is not enough.
		e.Must(e.Do("GET", "/api/admin/people", as(e.token("ops", "admin.workers", "queue.*")), nil), 403)

		list := e.Must(e.Do("GET", "/api/admin/people?limit=10", as(people), nil), 200).JSON
		if list["total"] != 1.0 || len(list["people"].([]any)) != 1 {
			t.Fatalf("people: %v", list)
		}
		shown := e.Must(e.Do("GET", "/api/admin/people/"+docPersonID, as(people), nil), 200).JSON
		if got := jsonText(shown["memberships"]); got != `[{"role":"member","team":"nlp"},{"role":"viewer","team":"vision"}]` ||
			shown["overrides"] != nil || shown["disabled_at"] != nil {
			t.Fatalf("person: %v", shown)
		}
		e.Must(e.Do("GET", "/api/admin/people/p_missing", as(people), nil), 404)

		bad := e.Must(e.Do("PUT", "/api/admin/people/"+docPersonID+"/memberships", as(people),
			`{"memberships": [{"team": "nlp", "role": "lead"}, {"team": "robotics", "role": "member"}]}`), 422)
		if d := bad.JSON["detail"].(string); !strings.Contains(d, `field "memberships[1].team": unknown team "robotics"`) {
			t.Fatalf("refusal: %s", d)
		}
		if got := e.Must(e.Do("GET", "/api/admin/people/"+docPersonID, as(people), nil), 200).JSON["overrides"]; got != nil {
			t.Fatalf("a refused change set overrides %v", got)
		}

		ok := e.Must(e.Do("PUT", "/api/admin/people/"+docPersonID+"/memberships", as(people),
			`{"memberships": [{"team": "nlp", "role": "lead"}]}`), 200).JSON
		if got := jsonText(ok["memberships"]); got != `[{"role":"lead","team":"nlp"},{"role":"viewer","team":"vision"}]` {
			t.Fatalf("memberships with an override: %s", got)
		}

		off := e.Must(e.Do("POST", "/api/admin/people/"+docPersonID+"/disable", as(people), nil), 200).JSON
		if off["tokens_revoked"] != 1.0 || off["sessions_ended"] != 1.0 || off["person"].(map[string]any)["disabled_at"] == nil {
			t.Fatalf("disable: %v", off)
		}
		e.Must(e.Do("GET", "/api/auth/whoami", as(person), nil), 401)
		if _, err := e.st.GetDashboardSession(t.Context(), "ada-session"); err == nil {
			t.Fatal("the disabled person's dashboard session is still there")
		}
		on := e.Must(e.Do("POST", "/api/admin/people/"+docPersonID+"/enable", as(people), nil), 200).JSON
		if on["disabled_at"] != nil {
			t.Fatalf("enable: %v", on)
		}
		e.Must(e.Do("GET", "/api/auth/whoami", as(person), nil), 401) // revoked stays revoked

		recs := e.Must(e.AdminDo("GET", "/api/admin/audit?target="+docPersonID, nil), 200).JSON["records"].([]any)
		var actions []string
		for _, r := range recs {
			actions = append(actions, r.(map[string]any)["action"].(string))
		}
		if got := strings.Join(actions, " "); got != "person.enable person.disable person.memberships" {
			t.Fatalf("audit of the person, newest first: %s", got)
		}
	})
}

// jsonText is v as compact JSON (object keys sorted).
func jsonText(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// A person's token acts as the person is now, not as the token was made:
// their groups' roles, then an admin's override, hold from the next
// request on.
func TestPersonTokenActsAsThePersonNow(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, open func(testing.TB) store.Store) {
		e := setup(t, open(t), withPeople)
		person := map[string]string{"Authorization": "Bearer " + e.signedInPerson()}
		me := e.Must(e.Do("GET", "/api/auth/whoami", person, nil), 200).JSON
		if me["kind"] != auth.KindPerson || me["id"] != docPersonID || me["team"] != "nlp" ||
			jsonText(me["scopes"]) != `["queue.cancel","queue.submit","queue.view"]` {
			t.Fatalf("whoami as the person: %v", me)
		}
		submit := `{"config": {}}`
		job := e.Must(e.Do("POST", "/api/queue/submit", person, submit), 201).JSON
		if got := e.Must(e.AdminDo("GET", "/api/queue/"+job["job_id"].(string), nil), 200).JSON["team"]; got != "nlp" {
			t.Fatalf("the person's job went to team %v, want nlp", got)
		}

		e.Must(e.AdminDo("PUT", "/api/admin/people/"+docPersonID+"/memberships",
			`{"memberships": [{"team": "nlp", "role": "none"}]}`), 200)
		me = e.Must(e.Do("GET", "/api/auth/whoami", person, nil), 200).JSON
		if me["team"] != "vision" || jsonText(me["scopes"]) != `["queue.view"]` {
			t.Fatalf("whoami after nlp was taken away: %v", me)
		}
		e.Must(e.Do("POST", "/api/queue/submit", person, submit), 403)
	})
}
