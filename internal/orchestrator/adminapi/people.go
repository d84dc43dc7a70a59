package adminapi

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/julienschmidt/httprouter"

	"github.com/simpletuner/simpletuner-orchestration/internal/api"
	"github.com/simpletuner/simpletuner-orchestration/internal/audit"
	"github.com/simpletuner/simpletuner-orchestration/internal/auth"
	"github.com/simpletuner/simpletuner-orchestration/internal/config"
	"github.com/simpletuner/simpletuner-orchestration/internal/identity"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator/web"
	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
	"github.com/simpletuner/simpletuner-orchestration/internal/store"
)

// PeopleStore is the people the people calls read and change.
type PeopleStore interface {
	GetPerson(ctx context.Context, id string) (store.Person, error)
	ListPeople(ctx context.Context, f store.PeopleFilter) ([]store.Person, int, error)
	DisablePerson(ctx context.Context, id string, at time.Time, rec func(store.PersonDisabled) *audit.Record) (store.PersonDisabled, error)
	EnablePerson(ctx context.Context, id string, rec *audit.Record) (store.Person, error)
	SetPersonOverrides(ctx context.Context, id string, overrides []store.Membership, rec *audit.Record) (store.Person, error)
}

func (a *API) peopleRoutes() []web.Route {
	ok, people := http.StatusOK, auth.ScopeAdminPeople
	return []web.Route{
		web.NewRoute("GET", "/api/admin/people", "", httpCall(a, people, ok, peopleQuery, a.People)),
		web.NewRoute("GET", "/api/admin/people/:id", "", httpCall(a, people, ok, personRef, a.Person)),
		web.NewRoute("POST", "/api/admin/people/:id/disable", "", httpCall(a, people, ok, personRef, a.DisablePerson)),
		web.NewRoute("POST", "/api/admin/people/:id/enable", "", httpCall(a, people, ok, personRef, a.EnablePerson)),
		web.NewRoute("PUT", "/api/admin/people/:id/memberships", "", httpCall(a, people, ok, a.parseSetMemberships, a.SetMemberships)),
	}
}

func peopleQuery(_ http.ResponseWriter, r *http.Request, _ httprouter.Params) (q api.PeopleQuery, err error) {
	q.Limit, q.Offset, err = page(r, 100, 1000)
	return q, err
}

func personRef(_ http.ResponseWriter, _ *http.Request, ps httprouter.Params) (api.PersonRef, error) {
	return api.PersonRef{ID: ps.ByName("id")}, nil
}

func (a *API) parseSetMemberships(w http.ResponseWriter, r *http.Request, ps httprouter.Params) (api.SetMemberships, error) {
	var req api.SetMemberships
	if err := a.readJSON(w, r, &req); err != nil {
		return req, err
	}
	req.ID = ps.ByName("id")
	return req, nil
}

func personNotFound(id string) error { return web.NotFound("person not found: %s", id) }

// People lists a page of the people who signed in, oldest first.
func (a *API) People(ctx context.Context, q api.PeopleQuery) (api.PersonList, error) {
	if _, err := authorize(ctx, auth.ScopeAdminPeople); err != nil {
		return api.PersonList{}, err
	}
	ps, total, err := a.store.ListPeople(ctx, store.PeopleFilter{Limit: q.Limit, Offset: q.Offset})
	if err != nil {
		return api.PersonList{}, err
	}
	out := api.PersonList{People: make([]api.Person, 0, len(ps)), Total: total}
	for _, p := range ps {
		out.People = append(out.People, a.personView(p))
	}
	return out, nil
}

// Person shows one person, with the memberships they hold now.
func (a *API) Person(ctx context.Context, ref api.PersonRef) (api.Person, error) {
	if _, err := authorize(ctx, auth.ScopeAdminPeople); err != nil {
		return api.Person{}, err
	}
	p, err := a.store.GetPerson(ctx, ref.ID)
	if errors.Is(err, store.ErrNotFound) {
		return api.Person{}, personNotFound(ref.ID)
	}
	if err != nil {
		return api.Person{}, err
	}
	return a.personView(p), nil
}

// DisablePerson disables a person: every admin token and dashboard session
// of theirs stops working at once, and they cannot sign in until enabled.
func (a *API) DisablePerson(ctx context.Context, ref api.PersonRef) (api.PersonDisabled, error) {
	c, err := authorize(ctx, auth.ScopeAdminPeople)
	if err != nil {
		return api.PersonDisabled{}, err
	}
	d, err := a.store.DisablePerson(ctx, ref.ID, time.Now(), func(d store.PersonDisabled) *audit.Record {
		rec := audit.New(c.Actor(), c.IP, "person.disable", "person", d.Person.ID, audit.Success,
			map[string]any{"username": d.Person.Username, "tokens_revoked": d.TokensRevoked, "sessions_ended": d.SessionsEnded})
		return &rec
	})
	if errors.Is(err, store.ErrNotFound) {
		return api.PersonDisabled{}, personNotFound(ref.ID)
	}
	if err != nil {
		return api.PersonDisabled{}, err
	}
	a.log.Info("person disabled", "person_id", d.Person.ID, "by", c.Actor(), "tokens_revoked", d.TokensRevoked,
		"sessions_ended", d.SessionsEnded)
	return api.PersonDisabled{Person: a.personView(d.Person), TokensRevoked: d.TokensRevoked, SessionsEnded: d.SessionsEnded}, nil
}

// EnablePerson lets a disabled person sign in again; the tokens revoked
// when they were disabled stay revoked.
func (a *API) EnablePerson(ctx context.Context, ref api.PersonRef) (api.Person, error) {
	c, err := authorize(ctx, auth.ScopeAdminPeople)
	if err != nil {
		return api.Person{}, err
	}
	rec := audit.New(c.Actor(), c.IP, "person.enable", "person", ref.ID, audit.Success, nil)
	p, err := a.store.EnablePerson(ctx, ref.ID, &rec)
	if errors.Is(err, store.ErrNotFound) {
		return api.Person{}, personNotFound(ref.ID)
	}
	if err != nil {
		return api.Person{}, err
	}
	return a.personView(p), nil
}

// SetMemberships replaces the memberships an admin set for a person, over
// what their groups map to. Every entry is checked before anything changes.
func (a *API) SetMemberships(ctx context.Context, req api.SetMemberships) (api.Person, error) {
	c, err := authorize(ctx, auth.ScopeAdminPeople)
	if err != nil {
		return api.Person{}, err
	}
	if req.Memberships == nil {
		return api.Person{}, web.Invalid("field \"memberships\" is required: a list of {team, role}; [] clears the overrides")
	}
	overrides, err := a.checkOverrides(*req.Memberships)
	if err != nil {
		return api.Person{}, err
	}
	shown := make([]api.Membership, 0, len(overrides))
	for _, o := range overrides {
		shown = append(shown, api.Membership(o))
	}
	rec := audit.New(c.Actor(), c.IP, "person.memberships", "person", req.ID, audit.Success, map[string]any{"overrides": shown})
	p, err := a.store.SetPersonOverrides(ctx, req.ID, overrides, &rec)
	if errors.Is(err, store.ErrNotFound) {
		return api.Person{}, personNotFound(req.ID)
	}
	if err != nil {
		return api.Person{}, err
	}
	return a.personView(p), nil
}

// overrideRoles are the roles an override may set.
var overrideRoles = append(slices.Clone(config.Roles), identity.RoleNone)

// checkOverrides checks each entry: a known role, a configured team (or
// "default"), no team twice, and no team only for the fleet's admin role.
func (a *API) checkOverrides(ms []api.Membership) ([]store.Membership, error) {
	out := make([]store.Membership, 0, len(ms))
	seen := map[string]bool{}
	for i, m := range ms {
		team, role := strings.TrimSpace(m.Team), strings.TrimSpace(m.Role)
		switch {
		case !slices.Contains(overrideRoles, role):
			return nil, web.Invalid("field \"memberships[%d].role\": unknown role %q; the roles are %s", i, m.Role,
				strings.Join(overrideRoles, ", "))
		case team == "" && role != "admin" && role != identity.RoleNone:
			return nil, web.Invalid("field \"memberships[%d].team\": must be set for role %q (only admin may be fleet-wide)", i, role)
		case team != "" && team != auth.DefaultTeam && !a.options().Teams.Known(team):
			return nil, web.Invalid("field \"memberships[%d].team\": unknown team %q; the teams are %s", i, m.Team, a.knownTeams())
		case seen[team]:
			return nil, web.Invalid("field \"memberships[%d].team\": team %q is listed twice", i, team)
		}
		seen[team] = true
		out = append(out, store.Membership{Team: team, Role: role})
	}
	return out, nil
}

// knownTeams names the teams an override may name.
func (a *API) knownTeams() string {
	names := []string{auth.DefaultTeam}
	for _, t := range a.options().Teams.Teams {
		if t.Name != auth.DefaultTeam {
			names = append(names, t.Name)
		}
	}
	return strings.Join(names, ", ")
}

// personView is a person as the API shows them, with what they hold under
// the current [[auth.groups]].
func (a *API) personView(p store.Person) api.Person {
	ms, extra := identity.Memberships(p.Groups, a.options().Groups, p.Overrides)
	v := api.Person{ID: p.ID, Provider: p.Provider, Issuer: p.Issuer, Subject: p.Subject, Username: p.Username, Email: p.Email,
		Name: p.Name, Groups: p.Groups, Memberships: make([]api.Membership, 0, len(ms)), ExtraScopes: extra,
		CreatedAt: protocol.Time(p.CreatedAt), LastSignIn: protocol.Time(p.LastSignIn), DisabledAt: timePtr(p.DisabledAt)}
	if v.Groups == nil {
		v.Groups = []string{}
	}
	if v.ExtraScopes == nil {
		v.ExtraScopes = []string{}
	}
	for _, m := range ms {
		v.Memberships = append(v.Memberships, api.Membership(m))
	}
	if p.Overrides != nil {
		v.Overrides = make([]api.Membership, 0, len(p.Overrides))
		for _, o := range p.Overrides {
			v.Overrides = append(v.Overrides, api.Membership(o))
		}
	}
	return v
}
