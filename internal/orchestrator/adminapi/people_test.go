package adminapi

import (
	"errors"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/api"
	"github.com/simpletuner/simpletuner-orchestration/internal/auth"
	"github.com/simpletuner/simpletuner-orchestration/internal/config"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator/fairshare"
	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
	"github.com/simpletuner/simpletuner-orchestration/internal/store"
)

// newPeopleAPI is the API with teams nlp and vision, groups mapped to
// roles, and one person, Ada, who signed in with group ml-eng.
func newPeopleAPI(t *testing.T) (*API, store.Store, store.Person) {
	a, st := newTestAPI(t)
	cfg := config.DefaultOrchestrator()
	cfg.Teams = []config.TeamConfig{{Name: "nlp", Share: 1}, {Name: "vision", Share: 1}}
	a.SetOptions(Options{Teams: fairshare.PolicyFrom(cfg), Groups: []config.GroupMapping{
		{Group: "ml-eng", Team: "nlp", Role: "member", Scopes: []string{auth.ScopeAdminAudit}},
	}})
	p, _, err := st.RecordSignIn(t.Context(), store.Person{ID: protocol.NewPersonID(), Provider: "oidc", Issuer: "https://idp.example.com",
		Subject: "ada", Username: "ada", Email: "ada@example.com", Name: "Ada", Groups: []string{"ml-eng"}, LastSignIn: time.Now()}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return a, st, p
}

var peopleAdmin = Caller{Principal: auth.Principal{Kind: auth.KindAdminToken, ID: "tok_admin", Scopes: []string{auth.ScopeAdminPeople}}, IP: "10.0.0.1"}

func wantAPIError(t *testing.T, err error, status int, detail string) {
	t.Helper()
	var ae *api.Error
	if !errors.As(err, &ae) || ae.Status != status || !strings.Contains(ae.Body.Detail, detail) {
		t.Fatalf("got %v, want HTTP %d naming %q", err, status, detail)
	}
}

func TestPeopleListAndShow(t *testing.T) {
	a, st, ada := newPeopleAPI(t)
	ctx := WithCaller(t.Context(), peopleAdmin)
	list, err := a.People(ctx, api.PeopleQuery{Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	if list.Total != 1 || len(list.People) != 1 || list.People[0].ID != ada.ID {
		t.Fatalf("people: %+v", list)
	}
	got, err := a.Person(ctx, api.PersonRef{ID: ada.ID})
	if err != nil {
		t.Fatal(err)
	}
	want := api.Person{ID: ada.ID, Provider: "oidc", Issuer: "https://idp.example.com", Subject: "ada", Username: "ada",
		Email: "ada@example.com", Name: "Ada", Groups: []string{"ml-eng"}, Memberships: []api.Membership{{Team: "nlp", Role: "member"}},
		ExtraScopes: []string{auth.ScopeAdminAudit}, CreatedAt: protocol.Time(ada.CreatedAt), LastSignIn: protocol.Time(ada.LastSignIn)}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("person:\n got  %+v\n want %+v", got, want)
	}
	_, err = a.Person(ctx, api.PersonRef{ID: "p_missing"})
	wantAPIError(t, err, http.StatusNotFound, "person not found: p_missing")

	// Without admin.people, nothing.
	viewer := WithCaller(t.Context(), Caller{Principal: auth.Principal{Kind: auth.KindAdminToken, ID: "v", Scopes: []string{"queue.*", auth.ScopeAdminWorkers}}})
	_, err = a.People(viewer, api.PeopleQuery{})
	wantAPIError(t, err, http.StatusForbidden, auth.ScopeAdminPeople)
	_, err = a.DisablePerson(viewer, api.PersonRef{ID: ada.ID})
	wantAPIError(t, err, http.StatusForbidden, auth.ScopeAdminPeople)
	if p, _ := st.GetPerson(t.Context(), ada.ID); p.DisabledAt != nil {
		t.Fatal("a caller without admin.people disabled a person")
	}
}

func TestSetMembershipsRefusesBadEntries(t *testing.T) {
	a, st, ada := newPeopleAPI(t)
	ctx := WithCaller(t.Context(), peopleAdmin)
	before := len(auditActions(t, st))
	for _, tc := range []struct {
		name   string
		ms     *[]api.Membership
		detail string
	}{
		{"missing", nil, `field "memberships" is required`},
		{"unknown team", &[]api.Membership{{Team: "nlp", Role: "lead"}, {Team: "robotics", Role: "member"}},
			`field "memberships[1].team": unknown team "robotics"; the teams are default, nlp, vision`},
		{"unknown role", &[]api.Membership{{Team: "nlp", Role: "owner"}},
			`field "memberships[0].role": unknown role "owner"; the roles are viewer, member, lead, admin, none`},
		{"no team below admin", &[]api.Membership{{Team: "", Role: "lead"}}, `field "memberships[0].team": must be set for role "lead"`},
		{"a team twice", &[]api.Membership{{Team: "nlp", Role: "lead"}, {Team: "nlp", Role: "viewer"}},
			`field "memberships[1].team": team "nlp" is listed twice`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := a.SetMemberships(ctx, api.SetMemberships{ID: ada.ID, Memberships: tc.ms})
			wantAPIError(t, err, http.StatusUnprocessableEntity, tc.detail)
		})
	}
	p, err := st.GetPerson(t.Context(), ada.ID)
	if err != nil || p.Overrides != nil {
		t.Fatalf("after refused changes: overrides %+v, %v", p.Overrides, err)
	}
	if after := len(auditActions(t, st)); after != before {
		t.Fatalf("refused changes wrote %d audit records", after-before)
	}
	_, err = a.SetMemberships(ctx, api.SetMemberships{ID: "p_missing", Memberships: &[]api.Membership{}})
	wantAPIError(t, err, http.StatusNotFound, "person not found: p_missing")
}

func TestSetMembershipsOverGroups(t *testing.T) {
	a, st, ada := newPeopleAPI(t)
	ctx := WithCaller(t.Context(), peopleAdmin)
	got, err := a.SetMemberships(ctx, api.SetMemberships{ID: ada.ID, Memberships: &[]api.Membership{
		{Team: "nlp", Role: "none"}, {Team: "vision", Role: "lead"}, {Team: "default", Role: "viewer"}}})
	if err != nil {
		t.Fatal(err)
	}
	wantOverrides := []api.Membership{{Team: "nlp", Role: "none"}, {Team: "vision", Role: "lead"}, {Team: "default", Role: "viewer"}}
	wantHeld := []api.Membership{{Team: "default", Role: "viewer"}, {Team: "vision", Role: "lead"}}
	if !reflect.DeepEqual(got.Overrides, wantOverrides) || !reflect.DeepEqual(got.Memberships, wantHeld) {
		t.Fatalf("overrides %+v memberships %+v", got.Overrides, got.Memberships)
	}
	if acts := auditActions(t, st); acts[len(acts)-1] != "person.memberships by admin:tok_admin on "+ada.ID {
		t.Fatalf("audit: %v", acts)
	}
	got, err = a.SetMemberships(ctx, api.SetMemberships{ID: ada.ID, Memberships: &[]api.Membership{}})
	if err != nil || got.Overrides != nil || !reflect.DeepEqual(got.Memberships, []api.Membership{{Team: "nlp", Role: "member"}}) {
		t.Fatalf("cleared: %+v, %v", got, err)
	}
}

func TestDisableAndEnablePerson(t *testing.T) {
	a, st, ada := newPeopleAPI(t)
	ctx := WithCaller(t.Context(), peopleAdmin)
	tok := store.AdminToken{ID: protocol.NewTokenID(), Name: "ada", Scopes: []string{auth.ScopeQueueView}, Hash: "h-ada", PersonID: ada.ID}
	if err := st.CreateAdminToken(t.Context(), tok, nil); err != nil {
		t.Fatal(err)
	}
	if err := st.CreateDashboardSession(t.Context(), store.DashboardSession{IDHash: "s-ada", TokenID: tok.ID}, nil); err != nil {
		t.Fatal(err)
	}
	d, err := a.DisablePerson(ctx, api.PersonRef{ID: ada.ID})
	if err != nil {
		t.Fatal(err)
	}
	if d.TokensRevoked != 1 || d.SessionsEnded != 1 || d.Person.DisabledAt == nil {
		t.Fatalf("disable: %+v", d)
	}
	if got, _ := st.GetAdminTokenByHash(t.Context(), "h-ada"); got.RevokedAt == nil {
		t.Fatal("the person's token still works")
	}
	if _, err := st.GetDashboardSession(t.Context(), "s-ada"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("the person's session: %v", err)
	}
	p, err := a.EnablePerson(ctx, api.PersonRef{ID: ada.ID})
	if err != nil || p.DisabledAt != nil {
		t.Fatalf("enable: %+v, %v", p, err)
	}
	acts := auditActions(t, st)
	if want := []string{"person.disable by admin:tok_admin on " + ada.ID, "person.enable by admin:tok_admin on " + ada.ID}; !reflect.DeepEqual(acts[len(acts)-2:], want) {
		t.Fatalf("audit: %v", acts)
	}
	_, err = a.DisablePerson(ctx, api.PersonRef{ID: "p_missing"})
	wantAPIError(t, err, http.StatusNotFound, "person not found: p_missing")
	_, err = a.EnablePerson(ctx, api.PersonRef{ID: "p_missing"})
	wantAPIError(t, err, http.StatusNotFound, "person not found: p_missing")
}

// auditActions are the audit log's records as "action by actor on target".
func auditActions(t *testing.T, st store.Store) []string {
	t.Helper()
	recs, err := st.ListAudit(t.Context(), 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, r := range recs {
		out = append(out, r.Action+" by "+r.Actor+" on "+r.TargetID)
	}
	return out
}
