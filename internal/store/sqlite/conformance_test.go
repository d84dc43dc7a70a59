package sqlite_test

import (
	"path/filepath"
	"strconv"
	"testing"

	"github.com/simpletuner/simpletuner-orchestration/internal/store"
	"github.com/simpletuner/simpletuner-orchestration/internal/store/sqlite"
	"github.com/simpletuner/simpletuner-orchestration/internal/store/storetest"
)

// The store contract, on SQLite.
func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store {
		s, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "state", "orchestrator.db"), nil)
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}

func BenchmarkJobCycle(b *testing.B) {
	s, err := sqlite.Open(b.Context(), filepath.Join(b.TempDir(), "orchestrator.db"), nil)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	storetest.BenchJobCycle(b, s)
}

func BenchmarkWorkerTokenLookup(b *testing.B) {
	s, err := sqlite.Open(b.Context(), filepath.Join(b.TempDir(), "orchestrator.db"), nil)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	storetest.BenchWorkerTokenLookup(b, s)
}

func BenchmarkTeamList(b *testing.B) {
	s, err := sqlite.Open(b.Context(), filepath.Join(b.TempDir(), "orchestrator.db"), nil)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	storetest.InsertTeamJobs(b, s, storetest.TeamListJobs)
	storetest.BenchTeamList(b, s)
}

// BenchmarkReleaseDependents: the end of a job that 100, or the most (1,000),
// waiting jobs depend on (make bench-dependencies).
func BenchmarkReleaseDependents(b *testing.B) {
	for _, n := range []int{100, store.MaxDependents} {
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			s, err := sqlite.Open(b.Context(), filepath.Join(b.TempDir(), "orchestrator.db"), nil)
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			storetest.BenchReleaseDependents(b, s, n)
		})
	}
}
