// Package identity turns what an identity provider says about a person (an
// LDAP entry, OIDC claims) into one Result, and the person's groups into
// team memberships through [[auth.groups]].
package identity

import (
	"slices"
	"strings"

	"github.com/go-ldap/ldap/v3"

	"github.com/simpletuner/simpletuner-orchestration/internal/config"
)

// Result is a person as an identity provider vouched for them at sign-in.
type Result struct {
	Provider string // "ldap" or "oidc"
	Issuer   string // "ldap:<url>" or the OIDC issuer
	Subject  string // stable within Issuer: objectGUID or entry DN, the sub claim
	Username string
	Email    string
	Name     string
	Groups   []string
}

// Membership is a role in a team; Team "" with role admin is the whole fleet.
type Membership struct {
	Team string
	Role string
}

// roleRank orders roles: a higher one includes what a lower one may do.
func roleRank(r string) int { return slices.Index(config.Roles, r) }

// Map applies every mapping whose group the person is in. Per team the
// highest role wins; the scopes of every matching mapping are added, each
// once. Groups compare without regard to case, and two LDAP DNs compare
// equal when they name the same entry however they are spaced or cased.
// Memberships come sorted by team.
func Map(groups []string, mappings []config.GroupMapping) (memberships []Membership, extraScopes []string) {
	best := map[string]string{}
	for _, m := range mappings {
		if !slices.ContainsFunc(groups, func(g string) bool { return sameGroup(g, m.Group) }) {
			continue
		}
		if cur, ok := best[m.Team]; !ok || roleRank(m.Role) > roleRank(cur) {
			best[m.Team] = m.Role
		}
		for _, s := range m.Scopes {
			if !slices.Contains(extraScopes, s) {
				extraScopes = append(extraScopes, s)
			}
		}
	}
	for team, role := range best {
		memberships = append(memberships, Membership{Team: team, Role: role})
	}
	slices.SortFunc(memberships, func(a, b Membership) int { return strings.Compare(a.Team, b.Team) })
	slices.Sort(extraScopes)
	return memberships, extraScopes
}

// sameGroup compares a group the provider reported with a configured one.
func sameGroup(got, want string) bool {
	if strings.EqualFold(got, want) {
		return true
	}
	if !strings.Contains(got, "=") || !strings.Contains(want, "=") {
		return false
	}
	a, errA := ldap.ParseDN(got)
	b, errB := ldap.ParseDN(want)
	return errA == nil && errB == nil && len(a.RDNs) > 0 && a.EqualFold(b)
}
