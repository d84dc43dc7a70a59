package storetest

import (
	"context"
	"log/slog"
	"path/filepath"
	"testing"

	"github.com/simpletuner/simpletuner-orchestration/internal/pgtest"
	"github.com/simpletuner/simpletuner-orchestration/internal/store"
	"github.com/simpletuner/simpletuner-orchestration/internal/store/postgres"
	"github.com/simpletuner/simpletuner-orchestration/internal/store/sqlite"
)

// Throwaway stores of every kind, for the tests of what is built on the
// store: SQLite in a temporary directory, PostgreSQL as a fresh database in
// the pgtest cluster (the test binary's TestMain must call pgtest.Main).

// Kinds names every store backend.
var Kinds = []string{"sqlite", "postgres"}

// Opener opens a fresh, empty, migrated store of one kind.
type Opener func(t testing.TB) store.Store

// Open opens a fresh store of the given kind, closed when t ends; it fails
// t on error.
func Open(t testing.TB, kind string) store.Store {
	t.Helper()
	var st store.Store
	var err error
	switch kind {
	case "sqlite":
		st, err = sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "o.db"), slog.New(slog.DiscardHandler))
	case "postgres":
		st, err = postgres.Open(context.Background(), pgtest.Start(t), slog.New(slog.DiscardHandler))
	default:
		t.Fatalf("unknown store kind %q", kind)
	}
	if err != nil {
		t.Fatal(err)
	}
	// A store left open keeps its PostgreSQL connections (idle ones for
	// minutes): across a package's tests they would exhaust the cluster's
	// max_connections. The test's other cleanups (a server using the store)
	// were registered later and so run first.
	t.Cleanup(func() { _ = st.Close() })
	return st
}

// ForEach runs fn once per kind, as parallel subtests named after the kind.
func ForEach(t *testing.T, fn func(t *testing.T, open Opener)) {
	t.Helper()
	for _, kind := range Kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			fn(t, func(t testing.TB) store.Store { return Open(t, kind) })
		})
	}
}
