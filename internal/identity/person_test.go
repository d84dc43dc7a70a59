package identity

import (
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/auth"
	"github.com/simpletuner/simpletuner-orchestration/internal/config"
	"github.com/simpletuner/simpletuner-orchestration/internal/store"
)

var personMappings = []config.GroupMapping{
	{Group: "ml", Team: "ml", Role: "member"},
	{Group: "ml-leads", Team: "ml", Role: "lead", Scopes: []string{"admin.audit"}},
	{Group: "vision", Team: "vision", Role: "viewer"},
	{Group: "ops", Team: "", Role: "admin"},
}

func TestMemberships(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		groups    []string
		overrides []store.Membership
		want      []Membership
		extra     []string
	}{
		{"groups only", []string{"ml", "vision"}, nil, []Membership{{"ml", "member"}, {"vision", "viewer"}}, nil},
		{"an override raises a mapped role", []string{"ml"}, []store.Membership{{Team: "ml", Role: "lead"}},
			[]Membership{{"ml", "lead"}}, nil},
		{"an override lowers a mapped role", []string{"ml-leads"}, []store.Membership{{Team: "ml", Role: "viewer"}},
			[]Membership{{"ml", "viewer"}}, []string{"admin.audit"}},
		{"an override adds a team", []string{"ml"}, []store.Membership{{Team: "nlp", Role: "member"}},
			[]Membership{{"ml", "member"}, {"nlp", "member"}}, nil},
		{"none removes a mapped team", []string{"ml", "vision"}, []store.Membership{{Team: "vision", Role: RoleNone}},
			[]Membership{{"ml", "member"}}, nil},
		{"none removes the fleet admin", []string{"ops", "ml"}, []store.Membership{{Team: "", Role: RoleNone}},
			[]Membership{{"ml", "member"}}, nil},
		{"no groups, override only", nil, []store.Membership{{Team: "", Role: "admin"}}, []Membership{{"", "admin"}}, nil},
		{"nothing", []string{"marketing"}, nil, nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, extra := Memberships(tc.groups, personMappings, tc.overrides)
			if !reflect.DeepEqual(got, tc.want) || !reflect.DeepEqual(extra, tc.extra) {
				t.Fatalf("Memberships = %v, %v; want %v, %v", got, extra, tc.want, tc.extra)
			}
		})
	}
}

func TestPrincipalOf(t *testing.T) {
	t.Parallel()
	person := store.Person{ID: "p_abcdefghijkl", Provider: "oidc", Issuer: "https://idp", Subject: "s", Username: "ada",
		Name: "Ada Lovelace", Groups: []string{"ml-leads", "vision"}}

	p, err := PrincipalOf(person, personMappings)
	if err != nil {
		t.Fatal(err)
	}
	if p.Kind != auth.KindPerson || p.Actor() != "person:p_abcdefghijkl" || p.Name != "Ada Lovelace" {
		t.Fatalf("principal %+v, actor %q", p, p.Actor())
	}
	wantScopes := []string{"admin.audit", "queue.approve", "queue.cancel", "queue.manage", "queue.submit", "queue.view"}
	if !reflect.DeepEqual(p.Scopes, wantScopes) || p.Team != "ml" {
		t.Fatalf("scopes %v team %q; want %v, ml", p.Scopes, p.Team, wantScopes)
	}
	checks := []struct {
		team, scope string
		want        bool
	}{
		{"ml", auth.ScopeQueueManage, true},
		{"ml", auth.ScopeQueueSubmit, true},
		{"vision", auth.ScopeQueueView, true},
		// A lead in ml is a viewer in vision: their ml role does not reach there.
		{"vision", auth.ScopeQueueSubmit, false},
		{"vision", auth.ScopeQueueManage, false},
		{"vision", auth.ScopeAdminAudit, true}, // extra scopes hold in every team they are in
		{"nlp", auth.ScopeQueueView, false},
		{"default", auth.ScopeQueueView, false},
	}
	for _, c := range checks {
		if got := p.HasIn(c.team, c.scope); got != c.want {
			t.Errorf("HasIn(%q, %q) = %v, want %v", c.team, c.scope, got, c.want)
		}
	}
	if p.Fleet() || p.RoleIn("ml") != auth.RoleLead || p.RoleIn("vision") != auth.RoleViewer || p.RoleIn("nlp") != auth.RoleNone {
		t.Fatalf("fleet %v, roles ml %v vision %v nlp %v", p.Fleet(), p.RoleIn("ml"), p.RoleIn("vision"), p.RoleIn("nlp"))
	}
	if got := p.Teams(); !reflect.DeepEqual(got, []string{"ml", "vision"}) {
		t.Fatalf("Teams() = %v", got)
	}

	// The admin's override applies at once, over the groups.
	person.Overrides = []store.Membership{{Team: "ml", Role: "viewer"}, {Team: "nlp", Role: "member"}}
	p, _ = PrincipalOf(person, personMappings)
	if p.HasIn("ml", auth.ScopeQueueSubmit) || !p.HasIn("nlp", auth.ScopeQueueSubmit) || p.Team != "nlp" {
		t.Fatalf("with overrides: submit in ml %v, in nlp %v, team %q", p.HasIn("ml", auth.ScopeQueueSubmit),
			p.HasIn("nlp", auth.ScopeQueueSubmit), p.Team)
	}

	// A fleet admin acts everywhere.
	admin := store.Person{ID: "p_admin", Username: "root", Groups: []string{"ops"}}
	p, _ = PrincipalOf(admin, personMappings)
	if !p.Fleet() || !p.Has(auth.ScopeAdminPeople) || p.RoleIn("anything") != auth.RoleAdmin || p.Teams() != nil || p.Name != "root" {
		t.Fatalf("fleet admin %+v", p)
	}

	// A person in no team holds nothing.
	p, _ = PrincipalOf(store.Person{ID: "p_x", Groups: []string{"marketing"}}, personMappings)
	if len(p.Scopes) != 0 || p.InTeam("default") || p.HasIn("default", auth.ScopeQueueView) || len(p.Teams()) != 0 {
		t.Fatalf("person in no team: %+v", p)
	}

	// A disabled person is no caller at all.
	now := time.Now()
	person.DisabledAt = &now
	if _, err := PrincipalOf(person, personMappings); !errors.Is(err, ErrDisabled) {
		t.Fatalf("disabled person: %v", err)
	}
}
