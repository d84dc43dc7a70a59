package gpuhistory

import (
	"fmt"
	"testing"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
)

func value(p *float64) float64 {
	if p == nil {
		return -1
	}
	return *p
}

// A minute's utilisation is the mean of its samples, its memory the
// largest; a minute without samples has none; points older than the span
// fall off.
func TestGPUHistoryPoints(t *testing.T) {
	t.Parallel()
	h := New()
	inventory := map[int]bool{0: true, 1: true}
	t0 := time.Unix(1_800_000_000, 0).Truncate(time.Minute)
	beat := func(at time.Time, util float64, usedMiB uint64) {
		h.NoteTelemetry("w", []protocol.GPUTelemetry{{Index: 1, UUID: "GPU-1", UtilizationPct: util, MemoryUsedMiB: usedMiB, MemoryTotalMiB: 1000}}, inventory, at)
	}
	beat(t0, 50, 100)
	beat(t0.Add(20*time.Second), 100, 600)
	beat(t0.Add(2*time.Minute), 10, 200) // a minute without heartbeats before it
	v := h.Worker("w", t0.Add(2*time.Minute))
	if len(v.GPUs) != 1 || v.GPUs[0].Index != 1 || v.GPUs[0].UUID != "GPU-1" {
		t.Fatalf("series %+v", v.GPUs)
	}
	util, mem := v.GPUs[0].UtilizationPct, v.GPUs[0].MemoryUsedPct
	n := len(util)
	if n != historyPoints || value(util[n-3]) != 75 || value(mem[n-3]) != 60 || util[n-2] != nil || value(util[n-1]) != 10 || value(mem[n-1]) != 20 {
		t.Fatalf("last three minutes: util %v %v %v, mem %v %v %v", value(util[n-3]), value(util[n-2]), value(util[n-1]),
			value(mem[n-3]), value(mem[n-2]), value(mem[n-1]))
	}
	if util[0] != nil {
		t.Fatalf("a point before the first heartbeat: %v", value(util[0]))
	}
	// Six hours on, the old minutes are gone.
	later := t0.Add((historyPoints + 3) * time.Minute)
	beat(later, 30, 0)
	v = h.Worker("w", later)
	for i, p := range v.GPUs[0].UtilizationPct[:historyPoints-1] {
		if p != nil {
			t.Fatalf("point %d survived six hours: %v", i, *p)
		}
	}
	// A replaced GPU (another UUID at the index) starts afresh.
	h.NoteTelemetry("w", []protocol.GPUTelemetry{{Index: 1, UUID: "GPU-new", UtilizationPct: 5}}, inventory, later)
	if v = h.Worker("w", later); v.GPUs[0].UUID != "GPU-new" || value(v.GPUs[0].UtilizationPct[historyPoints-1]) != 5 {
		t.Fatalf("replaced GPU: %+v", v.GPUs[0])
	}
	h.Forget("w")
	if v = h.Worker("w", later); len(v.GPUs) != 0 {
		t.Fatalf("a deleted worker's history: %+v", v.GPUs)
	}
}

// Only the GPUs of the worker's inventory get a series, however many
// indexes and UUIDs its heartbeats make up; a GPU that left the inventory
// loses its series.
func TestGPUHistoryKeepsTheInventoryOnly(t *testing.T) {
	t.Parallel()
	h := New()
	at := time.Unix(1_800_000_000, 0)
	inventory := map[int]bool{0: true, 1: true}
	for beat := range 50 {
		gpus := make([]protocol.GPUTelemetry, 64)
		for k := range gpus {
			gpus[k] = protocol.GPUTelemetry{Index: k, UUID: fmt.Sprintf("GPU-%d-%d", beat, k), UtilizationPct: 50}
		}
		h.NoteTelemetry("w", gpus, inventory, at.Add(time.Duration(beat)*time.Second))
	}
	if n := h.Series(); n != 2 {
		t.Fatalf("%d series kept for a worker with 2 GPUs", n)
	}
	h.NoteTelemetry("w", []protocol.GPUTelemetry{{Index: 0, UUID: "GPU-0"}}, map[int]bool{0: true}, at.Add(time.Minute))
	if v := h.Worker("w", at.Add(time.Minute)); len(v.GPUs) != 1 || v.GPUs[0].Index != 0 {
		t.Fatalf("after the inventory shrank: %+v", v.GPUs)
	}
	h.NoteTelemetry("w", []protocol.GPUTelemetry{{Index: 5, UUID: "GPU-5"}}, map[int]bool{}, at.Add(2*time.Minute))
	if n := h.Series(); n != 0 {
		t.Fatalf("%d series kept for a worker with no GPUs", n)
	}
}
