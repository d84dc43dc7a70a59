//go:build cgo

package gpu

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/simpletuner/simpletuner-orchestration/internal/gpu/gpumock"
)

// The driver's error events arrive named and classed: XID 79 blames the
// GPU, XID 13 the job; nothing arrives once the source is closed.
func TestNVMLEvents(t *testing.T) {
	t.Parallel()
	m := gpumock.New(2)
	src := NewNVMLFrom(m, testLogger(&bytes.Buffer{}))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	events := src.Events(ctx)
	if events == nil {
		t.Fatal("no event channel from a driver that supports events")
	}
	m.XID(1, 79)
	m.XID(0, 13)
	for _, want := range []struct {
		index    int
		text     string
		hardware bool
	}{{1, "XID 79 (fell off the bus)", true}, {0, "XID 13 (graphics engine exception)", false}} {
		select {
		case ev := <-events:
			if ev.Index != want.index || ev.UUID != m.UUID(want.index) || ev.Describe() != want.text || ev.Hardware() != want.hardware {
				t.Fatalf("event %+v (%q, hardware %v), want GPU %d %q hardware %v", ev, ev.Describe(), ev.Hardware(), want.index, want.text, want.hardware)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("no event for %q", want.text)
		}
	}
	if err := src.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case _, open := <-events:
		if open {
			t.Fatal("an event after the source closed")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the event channel stayed open after Close")
	}
}

// Health readings show a lost GPU, new uncorrectable ECC errors, a failed
// row remap and hardware slowdowns; the processes on each GPU are listed
// with their memory.
func TestNVMLHealthAndProcesses(t *testing.T) {
	t.Parallel()
	m := gpumock.New(4)
	var logs bytes.Buffer
	src := NewNVMLFrom(m, testLogger(&logs))
	defer src.Close()
	base, err := src.Health()
	if err != nil || len(base) != 4 {
		t.Fatalf("health: %v %v", base, err)
	}
	for _, r := range base {
		if r.Fault(r) != "" || r.Warning() != "" {
			t.Fatalf("a healthy GPU reads %+v: fault %q warning %q", r, r.Fault(r), r.Warning())
		}
	}
	m.AddECC(0, 2)
	m.Lose(1)
	m.FailRemap(2)
	m.SetClockEventReasons(3, nvml.ClocksThrottleReasonHwThermalSlowdown)
	now, err := src.Health()
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []string{"2 uncorrectable ECC error(s)", "lost from the bus", "row remapping failed", ""} {
		if got := now[i].Fault(base[i]); !strings.Contains(got, want) || (want == "") != (got == "") {
			t.Errorf("GPU %d fault %q, want %q", i, got, want)
		}
	}
	if w := now[3].Warning(); w != "slowdown: thermal" {
		t.Errorf("GPU 3 warning %q", w)
	}

	m.SetProcesses(2, map[int]uint64{4411: 1002 << 20})
	procs, err := src.Processes()
	if err == nil || !strings.Contains(err.Error(), "GPU 1") {
		t.Errorf("processes of a lost GPU: %v", err)
	}
	if p := procs[2]; len(p) != 1 || p[0].PID != 4411 || p[0].UsedBytes != 1002<<20 {
		t.Errorf("processes on GPU 2: %+v", p)
	}
	if len(procs[0]) != 0 {
		t.Errorf("processes on an idle GPU: %+v", procs[0])
	}
}

// The telemetry carries each GPU's index, memory total and power.
func TestNVMLTelemetryPower(t *testing.T) {
	t.Parallel()
	m := gpumock.New(1)
	m.SetUse(0, 97, 3<<30)
	src := NewNVMLFrom(m, testLogger(&bytes.Buffer{}))
	defer src.Close()
	tel, err := src.Telemetry()
	if err != nil || len(tel) != 1 {
		t.Fatalf("telemetry %v %v", tel, err)
	}
	if g := tel[0]; g.UtilizationPct != 97 || g.MemoryUsedMiB != 3072 || g.MemoryTotalMiB != 40960 || g.PowerW != 250 || g.Index != 0 {
		t.Errorf("telemetry %+v", g)
	}
}
