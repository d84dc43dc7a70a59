package e2etest

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/auth"
	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
	"github.com/simpletuner/simpletuner-orchestration/internal/store"
	"github.com/simpletuner/simpletuner-orchestration/internal/store/sqlite"
)

// DocPersonID is the person the documentation's people commands name.
const DocPersonID = "p_4k2m9x7q1z3a"

// SeedPerson records, in the SQLite database an orchestrator with this
// state directory will open, a person's sign-in (in the group ml-eng) and
// an admin token of theirs that may view the queue, as a sign-in would.
// There is no API that makes a person: only a sign-in does.
func SeedPerson(t testing.TB, stateDir, id, username string) (token string) {
	t.Helper()
	ctx := t.Context()
	st, err := sqlite.Open(ctx, filepath.Join(stateDir, "orchestrator.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	_, _, err = st.RecordSignIn(ctx, store.Person{ID: id, Provider: "oidc", Issuer: "https://idp.example.com",
		Subject: "sub-" + username, Username: username, Email: username + "@example.com", Name: username,
		Groups: []string{"ml-eng"}, LastSignIn: time.Now()}, nil)
	if err != nil {
		t.Fatal(err)
	}
	token = auth.NewAdminToken()
	err = st.CreateAdminToken(ctx, store.AdminToken{ID: protocol.NewTokenID(), Name: username, Scopes: []string{auth.ScopeQueueView},
		Hash: auth.Hash(token), PersonID: id, CreatedAt: time.Now()}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return token
}
