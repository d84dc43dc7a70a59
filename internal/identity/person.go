package identity

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/simpletuner/simpletuner-orchestration/internal/auth"
	"github.com/simpletuner/simpletuner-orchestration/internal/config"
	"github.com/simpletuner/simpletuner-orchestration/internal/store"
)

// RoleNone in an override takes a person out of a team (or, with no team,
// out of the fleet's admins) whatever their groups map to.
const RoleNone = "none"

// ErrDisabled: the person was disabled by an admin.
var ErrDisabled = errors.New("this person is disabled")

// Memberships are what a person holds: their groups mapped through
// [[auth.groups]] (Map), then the admin's overrides on top, each of which
// replaces the mapped role in its team ("none" removes the team). The
// extra scopes of the groups' mappings stay. Memberships come sorted by
// team.
func Memberships(groups []string, mappings []config.GroupMapping, overrides []store.Membership) (memberships []Membership, extraScopes []string) {
	mapped, extra := Map(groups, mappings)
	byTeam := map[string]string{}
	for _, m := range mapped {
		byTeam[m.Team] = m.Role
	}
	for _, o := range overrides {
		byTeam[o.Team] = o.Role
	}
	for team, role := range byTeam {
		if role != RoleNone {
			memberships = append(memberships, Membership{Team: team, Role: role})
		}
	}
	slices.SortFunc(memberships, func(a, b Membership) int { return strings.Compare(a.Team, b.Team) })
	return memberships, extra
}

// PrincipalOf is the caller a signed-in person is, with their memberships
// as of now (see Memberships); a disabled person is ErrDisabled. Their
// scopes are every role's and the extra ones together; the team their jobs
// go to is the first (by name) in which they may submit.
func PrincipalOf(p store.Person, mappings []config.GroupMapping) (auth.Principal, error) {
	if p.DisabledAt != nil {
		return auth.Principal{}, fmt.Errorf("person %s: %w", p.ID, ErrDisabled)
	}
	ms, extra := Memberships(p.Groups, mappings, p.Overrides)
	out := auth.Principal{Kind: auth.KindPerson, ID: p.ID, Name: displayName(p), Extra: extra}
	var scopes []string
	for _, m := range ms {
		role, ok := auth.ParseRole(m.Role)
		if !ok || role == auth.RoleNone {
			continue
		}
		out.Memberships = append(out.Memberships, auth.Membership{Team: m.Team, Role: role})
		for _, s := range auth.RoleScopes(role, m.Team) {
			if !slices.Contains(scopes, s) {
				scopes = append(scopes, s)
			}
		}
		if out.Team == "" && m.Team != "" && role >= auth.RoleMember {
			out.Team = m.Team
		}
	}
	if out.Team == "" {
		for _, m := range out.Memberships {
			if m.Team != "" {
				out.Team = m.Team
				break
			}
		}
	}
	for _, s := range extra {
		if !slices.Contains(scopes, s) {
			scopes = append(scopes, s)
		}
	}
	slices.Sort(scopes)
	out.Scopes = scopes
	return out, nil
}

// displayName is how a person is named: their name, else user name, else
// email, else their id.
func displayName(p store.Person) string {
	for _, n := range []string{p.Name, p.Username, p.Email} {
		if strings.TrimSpace(n) != "" {
			return n
		}
	}
	return p.ID
}
