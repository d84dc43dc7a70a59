package config

import (
	"slices"
	"strings"

	"github.com/simpletuner/simpletuner-orchestration/internal/auth"
	"github.com/simpletuner/simpletuner-orchestration/internal/webhook/spec"
)

// GroupMapping is one [[auth.groups]] entry: members of Group (a name or a
// DN, as the identity provider reports it) get Role in Team, and Scopes on
// top.
type GroupMapping struct {
	Group  string   `toml:"group"`
	Team   string   `toml:"team"`
	Role   string   `toml:"role"`
	Scopes []string `toml:"scopes"`
}

// Roles are the roles [[auth.groups]] may grant, lowest first.
var Roles = []string{"viewer", "member", "lead", "admin"}

// validateGroups checks every [[auth.groups]] entry: a group, a known
// role, a [[teams]] name (or "default"; none only for admin), known scopes.
func (l *loader) validateGroups(c *Orchestrator) {
	if l.failed["auth.groups"] {
		return
	}
	var teams []string
	for _, t := range c.Teams {
		teams = append(teams, t.Name)
	}
	for i, g := range c.Auth.Groups {
		at := func(format string, args ...any) { l.entryErrf("auth.groups", i, format, args...) }
		if strings.TrimSpace(g.Group) == "" {
			at("group: must not be empty")
		}
		switch {
		case !slices.Contains(Roles, g.Role):
			at("role: %q is not one of %s", g.Role, strings.Join(Roles, ", "))
		case g.Team == "" && g.Role != "admin":
			at("team: must be set for role %q (only admin may be fleet-wide)", g.Role)
		}
		if err := spec.CheckTeam(g.Team, teams); g.Team != "" && err != nil {
			at("team: %v", err)
		}
		for _, s := range g.Scopes {
			if !auth.ValidScope(s) {
				at("scopes: unknown scope %q", s)
			}
		}
	}
}
