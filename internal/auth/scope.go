package auth

import (
	"slices"
	"strconv"
	"strings"
	"time"
)

// Scopes an admin token can hold.
const (
	ScopeAdminWorkers = "admin.workers"
	ScopeAdminAudit   = "admin.audit"
	// ScopeAdminWebhooks: webhook subscriptions and their delivery logs.
	ScopeAdminWebhooks = "admin.webhooks"
	// ScopeAdminPeople: the people who sign in through an identity
	// provider: list them, disable and enable them, set their memberships.
	ScopeAdminPeople = "admin.people"
	// ScopeAdminApprovals: the approval rules (list, create, change, delete).
	ScopeAdminApprovals = "admin.approvals"
	ScopeQueueSubmit    = "queue.submit"
	ScopeQueueView      = "queue.view"
	ScopeQueueCancel    = "queue.cancel"
	ScopeQueueManage    = "queue.manage"
	// ScopeQueueApprove: approve or reject the team's jobs held by an
	// approval rule.
	ScopeQueueApprove = "queue.approve"
	ScopeAll          = "*"
)

// Principal kinds.
const (
	KindAdminToken = "admin_token"
	KindLocal      = "local"
	// KindPerson is someone signed in through an identity provider.
	KindPerson = "person"
)

var allScopes = []string{
	ScopeAdminWorkers, ScopeAdminAudit, ScopeAdminWebhooks, ScopeAdminPeople, ScopeAdminApprovals,
	ScopeQueueSubmit, ScopeQueueView, ScopeQueueCancel, ScopeQueueManage, ScopeQueueApprove,
	ScopeAll,
}

// AllScopes lists the protocol's scopes (a fresh slice each call).
func AllScopes() []string { return slices.Clone(allScopes) }

// ValidScope reports whether s may be granted: one of AllScopes, or a family
// wildcard such as "queue.*" or "admin.*" for a family that exists.
func ValidScope(s string) bool {
	if slices.Contains(allScopes, s) {
		return true
	}
	family, ok := strings.CutSuffix(s, ".*")
	if !ok || family == "" {
		return false
	}
	for _, known := range allScopes {
		if strings.HasPrefix(known, family+".") {
			return true
		}
	}
	return false
}

// Principal is an authenticated caller.
type Principal struct {
	Kind string // KindAdminToken, KindLocal or KindPerson
	ID   string // admin token id, "uid=N" for a local caller, or the person's "p_…"
	Name string // token name, "uid=N", or the person's name
	// TokenID is the admin token the caller presented (a person's: their
	// session's or login's); "" on the admin socket.
	TokenID string
	// TokenExpiresAt is when that token stops working; nil never.
	TokenExpiresAt *time.Time
	Scopes         []string // granted scopes; "*" and "family.*" are wildcards
	// Team is the team of the jobs the caller submits: its token's, or ""
	// (the default team) for a token without one and the admin socket.
	Team string
	// MaxPriority is the highest priority the caller's token was granted
	// for its jobs; nil leaves the caller its team's max_priority.
	MaxPriority *int
	// Memberships are a person's roles, one per team (Team "" with
	// RoleAdmin: the whole fleet); nil for tokens and the socket, whose
	// role follows from their scopes. A person's Scopes are those of
	// every membership's role and their Extra scopes together.
	Memberships []Membership
	// Extra are scopes a person holds beyond their roles ([[auth.groups]]
	// scopes), in every team they are in.
	Extra []string
}

// TeamOrDefault is the caller's team, "default" when it has none.
func (p Principal) TeamOrDefault() string {
	if p.Team == "" {
		return "default"
	}
	return p.Team
}

// Has reports whether p may act under scope: it holds the scope itself, "*",
// or the wildcard of the scope's family ("queue.*" grants "queue.view").
func (p Principal) Has(scope string) bool {
	for _, s := range p.Scopes {
		if s == ScopeAll || s == scope {
			return true
		}
		if family, ok := strings.CutSuffix(s, "*"); ok && strings.HasSuffix(family, ".") &&
			strings.HasPrefix(scope, family) {
			return true
		}
	}
	return false
}

// Actor names p in audit records: "admin:<token id>", "local:uid=N" or
// "person:<person id>".
func (p Principal) Actor() string {
	switch p.Kind {
	case KindAdminToken:
		return "admin:" + p.ID
	case KindLocal:
		return "local:" + p.ID
	case KindPerson:
		return "person:" + p.ID
	case "":
		return "anonymous"
	default:
		return p.Kind + ":" + p.ID
	}
}

// LocalPrincipal is the caller on the admin unix socket with peer uid. allowed
// (root or a member of the admin group, see InGroup) grants every scope;
// otherwise the principal holds none.
func LocalPrincipal(uid uint32, allowed bool) Principal {
	id := "uid=" + strconv.FormatUint(uint64(uid), 10)
	p := Principal{Kind: KindLocal, ID: id, Name: id}
	if allowed {
		p.Scopes = []string{ScopeAll}
	}
	return p
}
