package auth

import (
	"slices"
	"testing"
)

func TestRoles(t *testing.T) {
	tok := func(team string, scopes ...string) Principal {
		return Principal{Kind: KindAdminToken, ID: "t", Team: team, Scopes: scopes}
	}
	// person holds the scopes of their memberships' roles, as
	// identity.PrincipalOf makes them.
	person := func(ms ...Membership) Principal {
		p := Principal{Kind: KindPerson, ID: "p_x", Memberships: ms}
		for _, m := range ms {
			p.Scopes = append(p.Scopes, RoleScopes(m.Role, m.Team)...)
		}
		return p
	}
	cases := []struct {
		name  string
		p     Principal
		team  string
		fleet bool
		in    bool
		role  Role
		teams []string
	}{
		{"star is admin everywhere", tok("alpha", ScopeAll), "bravo", true, true, RoleAdmin, nil},
		{"local socket allowed", LocalPrincipal(0, true), "bravo", true, true, RoleAdmin, nil},
		{"local socket refused sees but holds nothing", LocalPrincipal(1000, false), "bravo", true, true, RoleNone, nil},
		{"manage is lead", tok("alpha", ScopeQueueManage, ScopeQueueView), "alpha", false, true, RoleLead, []string{"alpha"}},
		{"queue wildcard is lead", tok("alpha", "queue.*"), "alpha", false, true, RoleLead, []string{"alpha"}},
		{"submit is member", tok("alpha", ScopeQueueSubmit, ScopeQueueView, ScopeQueueCancel), "alpha", false, true, RoleMember, []string{"alpha"}},
		{"view is viewer", tok("alpha", ScopeQueueView), "alpha", false, true, RoleViewer, []string{"alpha"}},
		{"admin scopes alone are no role", tok("alpha", ScopeAdminAudit), "alpha", false, true, RoleNone, []string{"alpha"}},
		{"other team is none", tok("alpha", ScopeQueueManage), "bravo", false, false, RoleNone, []string{"alpha"}},
		{"no team is default", tok("", ScopeQueueView), "", false, true, RoleViewer, []string{"default"}},
		{"no team matches default by name", tok("", ScopeQueueView), "default", false, true, RoleViewer, []string{"default"}},
		{"default team token and legacy job", tok("default", ScopeQueueView), "", false, true, RoleViewer, []string{"default"}},
		{"person lead in one team", person(Membership{"alpha", RoleLead}, Membership{"bravo", RoleViewer}), "alpha", false, true, RoleLead, []string{"alpha", "bravo"}},
		{"person viewer in another", person(Membership{"alpha", RoleLead}, Membership{"bravo", RoleViewer}), "bravo", false, true, RoleViewer, []string{"alpha", "bravo"}},
		{"person outside a team", person(Membership{"alpha", RoleMember}), "charlie", false, false, RoleNone, []string{"alpha"}},
		{"person in default and a legacy job", person(Membership{"default", RoleMember}), "", false, true, RoleMember, []string{"default"}},
		{"person in no team", person(), "default", false, false, RoleNone, []string{}},
		{"person team admin", person(Membership{"alpha", RoleAdmin}), "alpha", false, true, RoleAdmin, []string{"alpha"}},
		{"person fleet admin", person(Membership{"", RoleAdmin}), "bravo", true, true, RoleAdmin, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := c.p.Fleet(); got != c.fleet {
				t.Errorf("Fleet() = %v, want %v", got, c.fleet)
			}
			if got := c.p.InTeam(c.team); got != c.in {
				t.Errorf("InTeam(%q) = %v, want %v", c.team, got, c.in)
			}
			if got := c.p.RoleIn(c.team); got != c.role {
				t.Errorf("RoleIn(%q) = %v, want %v", c.team, got, c.role)
			}
			if got := c.p.Teams(); !slices.Equal(got, c.teams) || (got == nil) != (c.teams == nil) {
				t.Errorf("Teams() = %#v, want %#v", got, c.teams)
			}
			if got, want := c.p.HasIn(c.team, ScopeQueueView), c.in && c.p.Has(ScopeQueueView); got != want {
				t.Errorf("HasIn(%q, view) = %v, want %v", c.team, got, want)
			}
			if got, want := c.p.HasIn(c.team, ScopeQueueManage), c.role >= RoleLead; got != want {
				t.Errorf("HasIn(%q, manage) = %v, want %v", c.team, got, want)
			}
			if c.p.Kind == KindPerson {
				if got, want := c.p.HasIn(c.team, ScopeQueueApprove), c.role >= RoleLead; got != want {
					t.Errorf("HasIn(%q, approve) = %v, want %v", c.team, got, want)
				}
			}
		})
	}
	if RoleViewer >= RoleMember || RoleMember >= RoleLead || RoleLead >= RoleAdmin {
		t.Fatal("roles out of order")
	}
	if r, ok := ParseRole("lead"); !ok || r != RoleLead {
		t.Fatalf("ParseRole(lead) = %v, %v", r, ok)
	}
	if _, ok := ParseRole("owner"); ok {
		t.Fatal("ParseRole accepted an unknown role")
	}
	if RoleLead.String() != "lead" {
		t.Fatalf("RoleLead.String() = %q", RoleLead.String())
	}
}
