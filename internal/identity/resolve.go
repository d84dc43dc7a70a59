package identity

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/audit"
	"github.com/simpletuner/simpletuner-orchestration/internal/auth"
	"github.com/simpletuner/simpletuner-orchestration/internal/config"
	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
	"github.com/simpletuner/simpletuner-orchestration/internal/store"
)

// PersonReader reads people by id.
type PersonReader interface {
	GetPerson(ctx context.Context, id string) (store.Person, error)
}

// Resolver says who an admin token stands for. A service token is what an
// admin granted it; a person's token (their dashboard session, their
// command-line login) is the person as they are now, so that a change of
// groups or overrides, or disabling them, holds from the next request on.
type Resolver struct {
	People PersonReader
	// Groups are [[auth.groups]] as currently loaded.
	Groups func() []config.GroupMapping
}

// Principal is the caller t stands for. For a person's token it reads the
// person: ErrDisabled when they are disabled.
func (r Resolver) Principal(ctx context.Context, t store.AdminToken) (auth.Principal, error) {
	if t.PersonID == "" {
		return auth.Principal{Kind: auth.KindAdminToken, ID: t.ID, TokenID: t.ID, TokenExpiresAt: t.ExpiresAt, Name: t.Name,
			Scopes: t.Scopes, Team: t.Team, MaxPriority: t.MaxPriority}, nil
	}
	p, err := r.People.GetPerson(ctx, t.PersonID)
	if err != nil {
		return auth.Principal{}, fmt.Errorf("the person of admin token %s: %w", t.ID, err)
	}
	out, err := PrincipalOf(p, r.groups())
	out.TokenID, out.TokenExpiresAt = t.ID, t.ExpiresAt
	return out, err
}

func (r Resolver) groups() []config.GroupMapping {
	if r.Groups == nil {
		return nil
	}
	return r.Groups()
}

// SignInStore records sign-ins.
type SignInStore interface {
	RecordSignIn(ctx context.Context, p store.Person, rec func(p store.Person, created bool) *audit.Record) (store.Person, bool, error)
}

// SignIn records that a provider vouched for res at the client peer and
// returns the person with who they are now. A disabled person is
// ErrDisabled (their sign-in is still recorded and audited, as refused);
// a person whom [[auth.groups]] and the overrides give no role at all is
// ErrNoRole, since they could do nothing once signed in.
func (r Resolver) SignIn(ctx context.Context, st SignInStore, res Result, peer string, now time.Time) (store.Person, auth.Principal, error) {
	in := store.Person{ID: protocol.NewPersonID(), Provider: res.Provider, Issuer: res.Issuer, Subject: res.Subject,
		Username: res.Username, Email: res.Email, Name: res.Name, Groups: res.Groups, CreatedAt: now, LastSignIn: now}
	p, _, err := st.RecordSignIn(ctx, in, func(p store.Person, created bool) *audit.Record {
		outcome, detail := audit.Success, map[string]string{"provider": res.Provider, "issuer": res.Issuer}
		if created {
			detail["first"] = "true"
		}
		if p.DisabledAt != nil {
			outcome, detail["reason"] = audit.Failure, "disabled"
		}
		rec := audit.New("person:"+p.ID, peer, "auth.sign_in", "person", p.ID, outcome, detail)
		return &rec
	})
	if err != nil {
		return store.Person{}, auth.Principal{}, err
	}
	principal, err := PrincipalOf(p, r.groups())
	if err == nil && len(principal.Scopes) == 0 {
		err = fmt.Errorf("person %s (%s): %w", p.ID, displayName(p), ErrNoRole)
	}
	return p, principal, err
}

// ErrNoRole: the person's groups map to no role and an admin gave them
// none.
var ErrNoRole = errors.New("none of this person's groups is given a role in [[auth.groups]], and no admin gave them one")
