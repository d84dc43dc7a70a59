package postgres_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/pgtest"
	"github.com/simpletuner/simpletuner-orchestration/internal/store"
	"github.com/simpletuner/simpletuner-orchestration/internal/store/postgres"
	"github.com/simpletuner/simpletuner-orchestration/internal/store/storetest"
)

// answerTimeout is [database] timeout's shipped default. Sixty writers
// queued on one row lock may wait longer than 10 s for their first answer on
// a loaded machine, and a shorter bound would fail them as if the server had
// gone silent.
const answerTimeout = 30 * time.Second

// The store contract, on PostgreSQL, through connections that time out
// unanswered requests as the orchestrator's do.
func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store {
		s, err := postgres.OpenWith(t.Context(), pgtest.Start(t), postgres.Options{Timeout: answerTimeout}, nil)
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}

func BenchmarkJobCycle(b *testing.B) {
	s, err := postgres.OpenWith(b.Context(), pgtest.Start(b), postgres.Options{Timeout: 10 * time.Second}, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	storetest.BenchJobCycle(b, s)
}

func BenchmarkTeamList(b *testing.B) {
	s, err := postgres.OpenWith(b.Context(), pgtest.Start(b), postgres.Options{Timeout: 10 * time.Second}, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	storetest.InsertTeamJobs(b, s, storetest.TeamListJobs)
	// What autovacuum does soon after on a real server: without statistics
	// the planner takes 27 rows for a team of 10,000.
	if _, err := s.DB().ExecContext(b.Context(), `ANALYZE jobs`); err != nil {
		b.Fatal(err)
	}
	storetest.BenchTeamList(b, s)
}

// BenchmarkReleaseDependents: the end of a job that 100, or the most (1,000),
// waiting jobs depend on (make bench-dependencies).
func BenchmarkReleaseDependents(b *testing.B) {
	for _, n := range []int{100, store.MaxDependents} {
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			s, err := postgres.OpenWith(b.Context(), pgtest.Start(b), postgres.Options{Timeout: 10 * time.Second}, nil)
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			storetest.BenchReleaseDependents(b, s, n)
		})
	}
}
