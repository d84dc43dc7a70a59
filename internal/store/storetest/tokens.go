package storetest

import (
	"testing"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/store"
)

var tokenTests = []test{
	{"AdminTokens", testAdminTokens},
}

func testAdminTokens(t *testing.T, s store.Store) {
	ctx := t.Context()
	toks, err := s.ListAdminTokens(ctx)
	if err != nil || len(toks) != 0 {
		t.Fatalf("ListAdminTokens on an empty store: %v, %v", toks, err)
	}
	// a is granted priorities up to 30; b keeps its team's limit (nil).
	maxPriority := 30
	a := store.AdminToken{ID: "tok_a", Name: "ci", Scopes: []string{"jobs:write", "workers:read"}, Hash: "ha", CreatedAt: at(time.Second),
		MaxPriority: &maxPriority}
	// b expires (a command-line login); a never does.
	expires := at(12 * time.Hour)
	b := store.AdminToken{ID: "tok_b", Name: "ops", Scopes: []string{}, Hash: "hb", CreatedAt: t0, ExpiresAt: &expires}
	noErr(t, s.CreateAdminToken(ctx, a, rec("token.create")), "CreateAdminToken")
	noErr(t, s.CreateAdminToken(ctx, b, nil), "CreateAdminToken")
	wantErr(t, s.CreateAdminToken(ctx, store.AdminToken{ID: "tok_a", Hash: "hc"}, nil), store.ErrDuplicate, "same id")
	wantErr(t, s.CreateAdminToken(ctx, store.AdminToken{ID: "tok_c", Hash: "ha"}, nil), store.ErrDuplicate, "same hash")

	got, err := s.GetAdminTokenByHash(ctx, "ha")
	noErr(t, err, "GetAdminTokenByHash")
	equal(t, got, a, "token a")
	_, err = s.GetAdminTokenByHash(ctx, "nope")
	wantErr(t, err, store.ErrNotFound, "unknown hash")
	_, err = s.GetAdminTokenByHash(ctx, "")
	wantErr(t, err, store.ErrNotFound, "empty hash")

	toks, err = s.ListAdminTokens(ctx)
	noErr(t, err, "ListAdminTokens")
	equal(t, toks, []store.AdminToken{b, a}, "tokens, oldest first")

	noErr(t, s.RevokeAdminToken(ctx, "tok_a", rec("token.revoke")), "RevokeAdminToken")
	got, err = s.GetAdminTokenByHash(ctx, "ha")
	noErr(t, err, "revoked token stays readable")
	if got.RevokedAt == nil {
		t.Fatal("RevokedAt not set")
	}
	first := *got.RevokedAt
	noErr(t, s.RevokeAdminToken(ctx, "tok_a", nil), "revoke again")
	got, _ = s.GetAdminTokenByHash(ctx, "ha")
	if !got.RevokedAt.Equal(first) {
		t.Fatalf("revoking again moved RevokedAt from %v to %v", first, got.RevokedAt)
	}
	wantErr(t, s.RevokeAdminToken(ctx, "tok_missing", rec("token.revoke")), store.ErrNotFound, "revoke unknown")
	if n := len(chain(t, s)); n != 2 {
		t.Fatalf("%d audit records, want 2", n)
	}
}
