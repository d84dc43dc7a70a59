package auth

// Role is what a caller may do within one team. Roles are ordered: each
// holds every right of the ones below it.
type Role int

// The roles, lowest first. RoleNone is a caller outside the team.
const (
	RoleNone   Role = iota
	RoleViewer      // reads the team's jobs, logs and artifacts
	RoleMember      // submits jobs, cancels its own
	RoleLead        // cancels any of the team's jobs, approves or rejects held ones
	RoleAdmin       // the whole fleet
)

var roleNames = [...]string{"none", "viewer", "member", "lead", "admin"}

func (r Role) String() string {
	if r < RoleNone || r > RoleAdmin {
		return "unknown"
	}
	return roleNames[r]
}

// ParseRole reads a role by its name ("viewer" … "admin", or "none").
func ParseRole(name string) (Role, bool) {
	for r, n := range roleNames {
		if n == name {
			return Role(r), true
		}
	}
	return RoleNone, false
}

// Membership is a person's role in one team; Team "" with RoleAdmin is the
// whole fleet.
type Membership struct {
	Team string
	Role Role
}

// RoleScopes are the scopes role grants within a team: a viewer reads, a
// member also submits and cancels their own jobs, a lead manages the
// team's and approves or rejects those an approval rule holds; an admin of a team holds every queue scope there, and the admin
// of the fleet (team "") every scope.
func RoleScopes(role Role, team string) []string {
	switch role {
	case RoleViewer:
		return []string{ScopeQueueView}
	case RoleMember:
		return []string{ScopeQueueView, ScopeQueueSubmit, ScopeQueueCancel}
	case RoleLead:
		return []string{ScopeQueueView, ScopeQueueSubmit, ScopeQueueCancel, ScopeQueueManage, ScopeQueueApprove}
	case RoleAdmin:
		if team == "" {
			return []string{ScopeAll}
		}
		return []string{"queue.*"}
	}
	return nil
}

// DefaultTeam is the team of callers and jobs that have none.
const DefaultTeam = "default"

// NormalTeam spells a team as it is shown: "" (from before teams) is the
// default team.
func NormalTeam(team string) string {
	if team == "" {
		return DefaultTeam
	}
	return team
}

// Fleet reports whether p acts on the whole fleet, across every team: a
// token with scope "*", or the local admin socket (whose allowed peers hold
// every scope and others none).
func (p Principal) Fleet() bool {
	if p.Kind == KindLocal {
		return true
	}
	for _, s := range p.Scopes {
		if s == ScopeAll {
			return true
		}
	}
	return false
}

// InTeam reports whether team's jobs are p's to see: its own team (a
// person: any team they have a role in), or any team for a fleet caller.
func (p Principal) InTeam(team string) bool {
	if p.Kind == KindPerson && !p.Fleet() {
		return p.membership(team) > RoleNone
	}
	return p.Fleet() || p.TeamOrDefault() == NormalTeam(team)
}

// HasIn reports whether p may act under scope on team's jobs. A person
// acts in each team with that team's role (and their extra scopes), not
// with what their roles elsewhere grant.
func (p Principal) HasIn(team, scope string) bool {
	if p.Kind == KindPerson && !p.Fleet() {
		role := p.membership(team)
		return role > RoleNone && (Principal{Scopes: append(RoleScopes(role, NormalTeam(team)), p.Extra...)}).Has(scope)
	}
	return p.InTeam(team) && p.Has(scope)
}

// membership is a person's role in team; RoleNone outside it.
func (p Principal) membership(team string) Role {
	team = NormalTeam(team)
	for _, m := range p.Memberships {
		if m.Team != "" && NormalTeam(m.Team) == team {
			return m.Role
		}
	}
	return RoleNone
}

// RoleIn is p's role in team: a person's membership there, or for a token
// derived from its scopes: "*" is admin, queue.manage lead, queue.submit
// member, queue.view viewer.
func (p Principal) RoleIn(team string) Role {
	switch {
	case !p.InTeam(team):
		return RoleNone
	case p.Fleet() && p.Has(ScopeAll):
		return RoleAdmin
	case p.Kind == KindPerson:
		return p.membership(team)
	}
	return p.roleFromScopes()
}

// roleFromScopes is a token's role in its team.
func (p Principal) roleFromScopes() Role {
	switch {
	case p.Has(ScopeQueueManage):
		return RoleLead
	case p.Has(ScopeQueueSubmit):
		return RoleMember
	case p.Has(ScopeQueueView):
		return RoleViewer
	}
	return RoleNone
}

// Teams are the teams whose jobs p sees; nil for a fleet caller, who sees
// every team's.
func (p Principal) Teams() []string {
	if p.Fleet() {
		return nil
	}
	if p.Kind == KindPerson {
		teams := []string{}
		for _, m := range p.Memberships {
			if m.Team != "" && m.Role > RoleNone {
				teams = append(teams, NormalTeam(m.Team))
			}
		}
		return teams
	}
	return []string{p.TeamOrDefault()}
}
