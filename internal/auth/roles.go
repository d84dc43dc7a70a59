package auth

// Role is what a caller may do within one team. Roles are ordered: each
// holds every right of the ones below it.
type Role int

// The roles, lowest first. RoleNone is a caller outside the team.
const (
	RoleNone   Role = iota
	RoleViewer      // reads the team's jobs, logs and artifacts
	RoleMember      // submits jobs, cancels its own
	RoleLead        // cancels any of the team's jobs
	RoleAdmin       // the whole fleet
)

var roleNames = [...]string{"none", "viewer", "member", "lead", "admin"}

func (r Role) String() string {
	if r < RoleNone || r > RoleAdmin {
		return "unknown"
	}
	return roleNames[r]
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

// InTeam reports whether team's jobs are p's to see: its own team, or any
// team for a fleet caller.
func (p Principal) InTeam(team string) bool {
	return p.Fleet() || p.TeamOrDefault() == NormalTeam(team)
}

// HasIn reports whether p may act under scope on team's jobs.
func (p Principal) HasIn(team, scope string) bool {
	return p.InTeam(team) && p.Has(scope)
}

// RoleIn is p's role in team, derived from its scopes: "*" is admin,
// queue.manage lead, queue.submit member, queue.view viewer.
func (p Principal) RoleIn(team string) Role {
	switch {
	case !p.InTeam(team):
		return RoleNone
	case p.Fleet() && p.Has(ScopeAll):
		return RoleAdmin
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
	return []string{p.TeamOrDefault()}
}
