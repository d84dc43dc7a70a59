package storetest

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/audit"
	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
	"github.com/simpletuner/simpletuner-orchestration/internal/store"
)

var peopleTests = []test{
	{"PersonFirstSignIn", testPersonFirstSignIn},
	{"PersonSecondSignInUpdates", testPersonSecondSignInUpdates},
	{"PersonConcurrentFirstSignIns", testPersonConcurrentFirstSignIns},
	{"PersonDisableRevokesEverything", testPersonDisableRevokesEverything},
	{"PersonEnable", testPersonEnable},
	{"PersonOverrides", testPersonOverrides},
	{"PeopleList", testPeopleList},
	{"PersonUnknown", testPersonUnknown},
}

// signIn records a sign-in of subject sub at when.
func signIn(t *testing.T, s store.Store, sub string, when time.Time, mod ...func(*store.Person)) (store.Person, bool) {
	t.Helper()
	p := store.Person{ID: protocol.NewPersonID(), Provider: "oidc", Issuer: "https://idp.example.com", Subject: sub,
		Username: sub, Email: sub + "@example.com", Name: "Person " + sub, Groups: []string{"ml"}, LastSignIn: when}
	for _, m := range mod {
		m(&p)
	}
	got, created, err := s.RecordSignIn(t.Context(), p, func(p store.Person, created bool) *audit.Record {
		action := "person.signin"
		if created {
			action = "person.create"
		}
		r := audit.New("person:"+p.ID, "", action, "person", p.ID, audit.Success, nil)
		return &r
	})
	noErr(t, err, "RecordSignIn")
	return got, created
}

func testPersonFirstSignIn(t *testing.T, s store.Store) {
	p, created := signIn(t, s, "alice", t0)
	if !created || p.ID == "" {
		t.Fatalf("first sign-in: created %v, id %q", created, p.ID)
	}
	want := store.Person{ID: p.ID, Provider: "oidc", Issuer: "https://idp.example.com", Subject: "alice", Username: "alice",
		Email: "alice@example.com", Name: "Person alice", Groups: []string{"ml"}, CreatedAt: t0, LastSignIn: t0}
	equal(t, p, want, "person after the first sign-in")
	got, err := s.GetPerson(t.Context(), p.ID)
	noErr(t, err, "GetPerson")
	equal(t, got, want, "person as read")
	recs := chain(t, s)
	if len(recs) != 1 || recs[0].Action != "person.create" || recs[0].TargetID != p.ID {
		t.Fatalf("audit after a first sign-in: %+v", recs)
	}
}

func testPersonSecondSignInUpdates(t *testing.T, s store.Store) {
	first, _ := signIn(t, s, "bob", t0)
	second, created := signIn(t, s, "bob", at(time.Hour), func(p *store.Person) {
		p.Email, p.Name, p.Groups = "robert@example.com", "Robert", []string{"ml", "ml-leads"}
	})
	if created {
		t.Fatal("a second sign-in of one subject created a person")
	}
	want := first
	want.Email, want.Name, want.Groups, want.LastSignIn = "robert@example.com", "Robert", []string{"ml", "ml-leads"}, at(time.Hour)
	equal(t, second, want, "person after the second sign-in")
	people, total, err := s.ListPeople(t.Context(), store.PeopleFilter{})
	noErr(t, err, "ListPeople")
	equal(t, total, 1, "people after two sign-ins of one subject")
	equal(t, people, []store.Person{want}, "people")
	// Another issuer's subject of the same name is another person.
	other, created := signIn(t, s, "bob", at(2*time.Hour), func(p *store.Person) { p.Issuer, p.Provider = "ldap:ldaps://dc", "ldap" })
	if !created || other.ID == first.ID {
		t.Fatalf("same subject at another issuer: created %v, id %s (first %s)", created, other.ID, first.ID)
	}
}

func testPersonConcurrentFirstSignIns(t *testing.T, s store.Store) {
	// Several rounds, each with every sign-in let go at once, so that the
	// first sign-ins of a subject do overlap.
	const rounds, n = 5, 8
	for round := range rounds {
		sub := fmt.Sprintf("carol-%d", round)
		var wg sync.WaitGroup
		start := make(chan struct{})
		ids := make([]string, n)
		created := make([]bool, n)
		errs := make([]error, n)
		for i := range n {
			wg.Go(func() {
				<-start
				p, c, err := s.RecordSignIn(t.Context(), store.Person{ID: protocol.NewPersonID(), Provider: "oidc",
					Issuer: "https://idp.example.com", Subject: sub, LastSignIn: at(time.Duration(i) * time.Second)}, nil)
				ids[i], created[i], errs[i] = p.ID, c, err
			})
		}
		close(start)
		wg.Wait()
		made := 0
		for i := range n {
			noErr(t, errs[i], fmt.Sprintf("round %d, sign-in %d", round, i))
			if ids[i] != ids[0] {
				t.Fatalf("round %d: sign-in %d got person %s, sign-in 0 %s", round, i, ids[i], ids[0])
			}
			if created[i] {
				made++
			}
		}
		equal(t, made, 1, fmt.Sprintf("round %d: sign-ins that created the person", round))
	}
	_, total, err := s.ListPeople(t.Context(), store.PeopleFilter{})
	noErr(t, err, "ListPeople")
	equal(t, total, rounds, "people")
}

func testPersonDisableRevokesEverything(t *testing.T, s store.Store) {
	ctx := t.Context()
	p, _ := signIn(t, s, "dave", t0)
	other, _ := signIn(t, s, "erin", t0)
	mine := []store.AdminToken{
		{ID: "tok_d1", Name: "dave session", Scopes: []string{"queue.view"}, Hash: "hd1", PersonID: p.ID, CreatedAt: t0},
		{ID: "tok_d2", Name: "dave cli", Scopes: []string{"queue.submit"}, Hash: "hd2", PersonID: p.ID, CreatedAt: t0},
	}
	for _, tok := range mine {
		noErr(t, s.CreateAdminToken(ctx, tok, nil), "CreateAdminToken "+tok.ID)
	}
	erins := store.AdminToken{ID: "tok_e1", Name: "erin", Scopes: []string{"queue.view"}, Hash: "he1", PersonID: other.ID, CreatedAt: t0}
	service := store.AdminToken{ID: "tok_s", Name: "ci", Scopes: []string{"*"}, Hash: "hs", CreatedAt: t0}
	noErr(t, s.CreateAdminToken(ctx, erins, nil), "CreateAdminToken erin")
	noErr(t, s.CreateAdminToken(ctx, service, nil), "CreateAdminToken service")
	got, err := s.GetAdminTokenByHash(ctx, "hd1")
	noErr(t, err, "GetAdminTokenByHash")
	equal(t, got, mine[0], "a person's token as read")
	for _, sess := range []store.DashboardSession{{IDHash: "sd1", TokenID: "tok_d1"}, {IDHash: "sd2", TokenID: "tok_d1"},
		{IDHash: "se1", TokenID: "tok_e1"}, {IDHash: "ss", TokenID: "tok_s"}} {
		sess.CreatedAt = t0
		noErr(t, s.CreateDashboardSession(ctx, sess, nil), "CreateDashboardSession "+sess.IDHash)
	}
	before := len(chain(t, s))

	done, err := s.DisablePerson(ctx, p.ID, at(time.Minute), func(d store.PersonDisabled) *audit.Record {
		r := audit.New("admin:tok_s", "", "person.disable", "person", d.Person.ID, audit.Success,
			map[string]int{"tokens_revoked": d.TokensRevoked, "sessions_ended": d.SessionsEnded})
		return &r
	})
	noErr(t, err, "DisablePerson")
	equal(t, done.TokensRevoked, 2, "tokens revoked")
	equal(t, done.SessionsEnded, 2, "sessions ended")
	if done.Person.DisabledAt == nil || !done.Person.DisabledAt.Equal(at(time.Minute)) {
		t.Fatalf("DisabledAt %v, want %v", done.Person.DisabledAt, at(time.Minute))
	}
	// At once: the tokens read as revoked and the sessions are gone.
	for _, h := range []string{"hd1", "hd2"} {
		tok, err := s.GetAdminTokenByHash(ctx, h)
		noErr(t, err, "GetAdminTokenByHash "+h)
		if tok.RevokedAt == nil || !tok.RevokedAt.Equal(at(time.Minute)) {
			t.Fatalf("token %s of a disabled person: revoked at %v", tok.ID, tok.RevokedAt)
		}
	}
	for _, h := range []string{"sd1", "sd2"} {
		_, err := s.GetDashboardSession(ctx, h)
		wantErr(t, err, store.ErrNotFound, "session "+h+" of a disabled person")
	}
	// Nobody else's credentials changed.
	for _, h := range []string{"he1", "hs"} {
		tok, err := s.GetAdminTokenByHash(ctx, h)
		noErr(t, err, "GetAdminTokenByHash "+h)
		if tok.RevokedAt != nil {
			t.Fatalf("token %s revoked by disabling another person", tok.ID)
		}
	}
	for _, h := range []string{"se1", "ss"} {
		_, err := s.GetDashboardSession(ctx, h)
		noErr(t, err, "session "+h+" of someone else")
	}
	recs := chain(t, s)
	if len(recs) != before+1 || recs[len(recs)-1].Action != "person.disable" {
		t.Fatalf("audit after disabling: %d records (before %d), last %+v", len(recs), before, recs[len(recs)-1])
	}
	// No new token for a disabled person, nor a session on a revoked one.
	wantErr(t, s.CreateAdminToken(ctx, store.AdminToken{ID: "tok_d3", Hash: "hd3", PersonID: p.ID}, nil),
		store.ErrPersonDisabled, "token for a disabled person")
	wantErr(t, s.CreateDashboardSession(ctx, store.DashboardSession{IDHash: "sd3", TokenID: "tok_d1"}, nil),
		store.ErrNotFound, "session on a disabled person's token")
	// Disabling again keeps the first time and revokes nothing more.
	again, err := s.DisablePerson(ctx, p.ID, at(time.Hour), nil)
	noErr(t, err, "DisablePerson again")
	equal(t, again.Person.DisabledAt, done.Person.DisabledAt, "DisabledAt after a second disable")
	equal(t, again.TokensRevoked+again.SessionsEnded, 0, "credentials ended by a second disable")
	// A disabled person's sign-in updates what the provider says but not
	// when they last signed in.
	signedIn, _ := signIn(t, s, "dave", at(2*time.Hour), func(p *store.Person) { p.Name = "David" })
	equal(t, signedIn.Name, "David", "name after a disabled person's sign-in")
	equal(t, signedIn.LastSignIn, t0, "LastSignIn after a disabled person's sign-in")
	_, err = s.DisablePerson(ctx, "p_missing", t0, nil)
	wantErr(t, err, store.ErrNotFound, "disable an unknown person")
}

func testPersonEnable(t *testing.T, s store.Store) {
	ctx := t.Context()
	p, _ := signIn(t, s, "frank", t0)
	noErr(t, s.CreateAdminToken(ctx, store.AdminToken{ID: "tok_f", Hash: "hf", PersonID: p.ID, CreatedAt: t0}, nil), "CreateAdminToken")
	_, err := s.DisablePerson(ctx, p.ID, at(time.Minute), nil)
	noErr(t, err, "DisablePerson")
	got, err := s.EnablePerson(ctx, p.ID, rec("person.enable"))
	noErr(t, err, "EnablePerson")
	if got.DisabledAt != nil {
		t.Fatalf("DisabledAt after enable: %v", got.DisabledAt)
	}
	tok, err := s.GetAdminTokenByHash(ctx, "hf")
	noErr(t, err, "GetAdminTokenByHash")
	if tok.RevokedAt == nil {
		t.Fatal("enabling a person brought their revoked token back")
	}
	noErr(t, s.CreateAdminToken(ctx, store.AdminToken{ID: "tok_f2", Hash: "hf2", PersonID: p.ID, CreatedAt: t0}, nil),
		"CreateAdminToken for an enabled person")
	_, err = s.EnablePerson(ctx, "p_missing", rec("person.enable"))
	wantErr(t, err, store.ErrNotFound, "enable an unknown person")
	wantErr(t, s.CreateAdminToken(ctx, store.AdminToken{ID: "tok_x", Hash: "hx", PersonID: "p_missing"}, nil),
		store.ErrNotFound, "token for an unknown person")
	if n := len(chain(t, s)); n != 2 {
		t.Fatalf("%d audit records, want 2 (create, enable)", n)
	}
}

func testPersonOverrides(t *testing.T, s store.Store) {
	ctx := t.Context()
	p, _ := signIn(t, s, "grace", t0)
	set := []store.Membership{{Team: "nlp", Role: "lead"}, {Team: "", Role: "admin"}}
	got, err := s.SetPersonOverrides(ctx, p.ID, set, rec("person.memberships"))
	noErr(t, err, "SetPersonOverrides")
	equal(t, got.Overrides, set, "overrides")
	// A sign-in leaves what an admin set.
	again, _ := signIn(t, s, "grace", at(time.Hour), func(p *store.Person) { p.Groups = nil })
	equal(t, again.Overrides, set, "overrides after a sign-in")
	equal(t, again.Groups, []string{}, "groups after a sign-in with none")
	got, err = s.SetPersonOverrides(ctx, p.ID, nil, rec("person.memberships"))
	noErr(t, err, "SetPersonOverrides(nil)")
	if got.Overrides != nil {
		t.Fatalf("overrides after clearing: %+v", got.Overrides)
	}
	_, err = s.SetPersonOverrides(ctx, "p_missing", set, rec("person.memberships"))
	wantErr(t, err, store.ErrNotFound, "overrides of an unknown person")
	if n := len(chain(t, s)); n != 4 {
		t.Fatalf("%d audit records, want 4 (create, set, sign-in, clear)", n)
	}
}

func testPeopleList(t *testing.T, s store.Store) {
	var want []store.Person
	for i := range 5 {
		p, _ := signIn(t, s, fmt.Sprintf("u%d", i), at(time.Duration(i)*time.Second))
		want = append(want, p)
	}
	page, total, err := s.ListPeople(t.Context(), store.PeopleFilter{Limit: 2, Offset: 2})
	noErr(t, err, "ListPeople")
	equal(t, total, 5, "total")
	equal(t, page, want[2:4], "second page of two, oldest first")
	all, _, err := s.ListPeople(t.Context(), store.PeopleFilter{})
	noErr(t, err, "ListPeople")
	equal(t, all, want, "every person")
}

func testPersonUnknown(t *testing.T, s store.Store) {
	_, err := s.GetPerson(t.Context(), "p_missing")
	wantErr(t, err, store.ErrNotFound, "unknown person")
	people, total, err := s.ListPeople(t.Context(), store.PeopleFilter{})
	noErr(t, err, "ListPeople on an empty store")
	if len(people) != 0 || total != 0 {
		t.Fatalf("people on an empty store: %v, %d", people, total)
	}
	_, _, err = s.RecordSignIn(t.Context(), store.Person{ID: protocol.NewPersonID(), Provider: "oidc", Issuer: "i"}, nil)
	if err == nil {
		t.Fatal("a sign-in without a subject was recorded")
	}
}
