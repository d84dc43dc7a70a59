package store

import (
	"context"
	"errors"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/audit"
)

// Person is someone who signed in through an identity provider. The
// provider's Issuer and Subject name them for good; the rest is what the
// provider said at the last sign-in, and what an admin set.
type Person struct {
	ID       string // "p_…"
	Provider string // "ldap" or "oidc"
	Issuer   string
	Subject  string
	Username string
	Email    string
	Name     string
	// Groups are the provider's groups at the last sign-in; [[auth.groups]]
	// maps them to memberships.
	Groups []string
	// Overrides are the memberships an admin set, applied over what the
	// groups map to; nil when an admin set none.
	Overrides  []Membership
	CreatedAt  time.Time
	LastSignIn time.Time
	// DisabledAt is set while the person is disabled: they may not sign
	// in, and every token of theirs was revoked when it was set.
	DisabledAt *time.Time
}

// Membership is a role in a team as an admin set it; Team "" with role
// "admin" is the whole fleet.
type Membership struct {
	Team string `json:"team"`
	Role string `json:"role"`
}

// PeopleFilter pages ListPeople, oldest first. Zero values mean "no limit".
type PeopleFilter struct {
	Limit  int
	Offset int
}

// PersonDisabled is what disabling a person did.
type PersonDisabled struct {
	Person Person
	// TokensRevoked and SessionsEnded count the person's admin tokens that
	// were still live and their dashboard sessions.
	TokensRevoked int
	SessionsEnded int
}

// ErrPersonDisabled: a token was to be made for a disabled person.
var ErrPersonDisabled = errors.New("the person is disabled")

// People keeps the people who sign in through an identity provider.
type People interface {
	// RecordSignIn records that the provider vouched for p (Issuer and
	// Subject name them): the first time it inserts p, with p.ID, and after
	// that it updates the provider's fields (username, email, name,
	// groups) and LastSignIn, keeping the row's ID, CreatedAt, Overrides
	// and DisabledAt; a disabled person's LastSignIn stays. Of two first
	// sign-ins of one subject at the same time, one inserts and the other
	// updates. rec, when set, gives the audit record to append in the
	// same transaction (created: the person is new); it may run more than
	// once (see Store).
	RecordSignIn(ctx context.Context, p Person, rec func(p Person, created bool) *audit.Record) (Person, bool, error)
	GetPerson(ctx context.Context, id string) (Person, error)
	// ListPeople returns a page of people, oldest first, and how many
	// there are in all.
	ListPeople(ctx context.Context, f PeopleFilter) ([]Person, int, error)
	// DisablePerson, in one transaction, marks the person disabled at at
	// (disabling again keeps the first time), revokes every admin token
	// of theirs and deletes the dashboard sessions that act through them,
	// and appends rec's record.
	DisablePerson(ctx context.Context, id string, at time.Time, rec func(PersonDisabled) *audit.Record) (PersonDisabled, error)
	// EnablePerson clears DisabledAt. Their revoked tokens stay revoked.
	EnablePerson(ctx context.Context, id string, rec *audit.Record) (Person, error)
	// SetPersonOverrides replaces the person's overrides (nil: none).
	SetPersonOverrides(ctx context.Context, id string, overrides []Membership, rec *audit.Record) (Person, error)
}
