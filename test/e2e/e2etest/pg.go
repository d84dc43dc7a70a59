package e2etest

import (
	"testing"

	"github.com/simpletuner/simpletuner-orchestration/internal/pgtest"
)

// PG is a private PostgreSQL cluster that a scenario may stop and start again
// on the same port and data directory (pgtest's shared cluster cannot be
// restarted under other tests' feet).
type PG = pgtest.Cluster

// StartPG initdbs and starts a cluster; it is removed when the test ends.
func StartPG(t testing.TB) *PG {
	t.Helper()
	c, err := pgtest.NewCluster()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("---- postgres log ----\n%s", c.Logs())
		}
		c.Remove()
	})
	return c
}
