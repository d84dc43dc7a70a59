package store

import (
	"testing"

	"github.com/simpletuner/simpletuner-orchestration/internal/lifecycle"
	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
)

func TestCapacityReadsTheWorkerRow(t *testing.T) {
	eight := ReadGPUInfo([]byte(`{"name":"H100","count":8}`))
	one := Worker{Protocol: 1, GPUInfo: eight, Capabilities: protocol.Capabilities{MaxJobs: 4}, Running: 1, GPUsUsed: 8}
	if c := one.Capacity(); c.SharesGPUs() || c.Slots() != 1 || !c.Load().Full() || c.FreeUsableGPUs() != 0 {
		t.Fatalf("protocol-1 worker: shares %v, slots %d, full %v, free %d; want a job at a time, full",
			c.SharesGPUs(), c.Slots(), c.Load().Full(), c.FreeUsableGPUs())
	}
	shared := Worker{Protocol: 2, GPUInfo: eight, Capabilities: protocol.Capabilities{MaxJobs: 4}, Running: 2, GPUsUsed: 3,
		GPUConditions: []protocol.GPUCondition{{Index: 6}, {Index: 7}}}
	c := shared.Capacity()
	if !c.SharesGPUs() || c.Slots() != 4 || c.FreeUsableGPUs() != 3 {
		t.Fatalf("sharing worker: shares %v, slots %d, free usable %d; want true, 4, 3", c.SharesGPUs(), c.Slots(), c.FreeUsableGPUs())
	}
	if want := (lifecycle.Load{Running: 2, Slots: 4, GPUs: 8, GPUsUsed: 3}); c.Load() != want {
		t.Fatalf("load %+v, want %+v", c.Load(), want)
	}
	if u := c.UnavailableGPUs(); len(u) != 2 || !u[6] || !u[7] {
		t.Fatalf("unavailable GPUs %v, want 6 and 7", u)
	}
	shared.WholeWorkerHeld = true
	if !shared.Capacity().Load().Full() {
		t.Fatal("a worker held whole has room, want full")
	}
}
