package orchestrator_test

import (
	"testing"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator"
	"github.com/simpletuner/simpletuner-orchestration/internal/testutil"
)

// The fleet's chart counts the GPUs in use, asked for (a whole-worker job
// as the largest worker) and online, once a minute.
func TestFleetGPUHistory(t *testing.T) {
	t.Parallel()
	e := setup(t, backends["sqlite"](t), patientHeartbeats, func(o *orchestrator.Options) { o.SetFleetHistoryEvery(20 * time.Millisecond) })
	a := e.startSlotAgent("a", 4)
	e.Submit(gpuJobBody(3, 10))
	a.take()
	e.Submit(gpuJobBody(2, 10)) // waits: one GPU free
	e.Submit(map[string]any{})  // a whole worker: four GPUs asked
	testutil.Eventually(t, eventWait, "the fleet's counts", func() bool {
		f := e.Must(e.AdminDo("GET", "/api/admin/fleet/gpu-history", nil), 200).JSON
		last := func(k string) float64 {
			l := f[k].([]any)
			v, _ := l[len(l)-1].(float64)
			return v
		}
		return last("in_use") == 3 && last("asked") == 6 && last("online") == 4
	})
}
