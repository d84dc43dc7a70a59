package worker

import (
	"log/slog"
	"strings"
	"testing"

	"github.com/simpletuner/simpletuner-orchestration/internal/gpu"
	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
)

// A job can name its process anything, escape sequences included, and a
// held GPU's reason names it: what workerd reports must still be accepted
// by the orchestrator, which refuses control characters and long texts.
func TestGPUConditionsStayWithinTheProtocolLimits(t *testing.T) {
	t.Parallel()
	src := gpu.NewStatic("nvidia", []gpu.Device{{GPUDevice: protocol.GPUDevice{UUID: "GPU-0", Name: "A100"}}, {GPUDevice: protocol.GPUDevice{UUID: "GPU-1", Name: "A100"}}})
	g := newGPUWatch(src, t.TempDir(), slog.New(slog.DiscardHandler))
	inv, _ := src.Inventory()
	if err := g.start(inv); err != nil {
		t.Fatal(err)
	}
	g.hold(inv.Devices[0], "pid 7 uid 1000 (\x01x\x1b]0;owned\x07\u202e): "+strings.Repeat("9", 2000))
	g.fence(1, "XID 79 \x1b[2J(fell off the bus)")
	conds := *g.conditions()
	if err := protocol.CheckGPUConditions(conds); err != nil {
		t.Fatalf("the orchestrator would refuse %+v: %v", conds, err)
	}
	if r := conds[1].Reason; r != `XID 79 \x1b[2J(fell off the bus)` {
		t.Fatalf("fence reason %q", r)
	}
	if r := conds[0].Reason; !strings.HasPrefix(r, `pid 7 uid 1000 (\x01x\x1b]0;owned\x07\u202e): 999`) || !strings.HasSuffix(r, "…") {
		t.Fatalf("held reason %q", r)
	}
	tel := []protocol.GPUTelemetry{{Index: 0, UUID: "GPU-0", Health: g.health(0)}, {Index: 1, UUID: "GPU-1", Health: g.health(1)}}
	if err := protocol.CheckGPUTelemetry(tel); err != nil {
		t.Fatalf("the orchestrator would refuse the health %+v: %v", tel, err)
	}
}
