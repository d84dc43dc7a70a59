package webhook

import (
	"testing"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
	"github.com/simpletuner/simpletuner-orchestration/internal/store"
)

// A GPU's fences within its window are held, the latest winning, and sent
// when the window ends; a GPU no longer unhealthy at the end sends nothing.
func TestGPUFencesAreHeldToTheWindowsEnd(t *testing.T) {
	t.Parallel()
	const window = 200 * time.Millisecond
	e := NewEmitter(nil)
	e.SetGPUEventWindow(window)
	written := make(chan store.OutboxEvent, 100)
	e.SetHeldEventWriter(func(evs []store.OutboxEvent) {
		for _, ev := range evs {
			written <- ev
		}
	})
	t.Cleanup(e.Close)
	healthy := store.Worker{ID: "w_1", Name: "box", Status: protocol.WorkerIdle}
	fenced := func(reason string) store.Worker {
		w := healthy
		w.GPUConditions = []protocol.GPUCondition{{Index: 3, UUID: "GPU-3", State: protocol.GPUUnhealthy, Reason: reason}}
		return w
	}
	reason := func(ev store.OutboxEvent) string { return payloadOf(t, ev).GPU.Reason }

	start := time.Now()
	sent := e.WorkerChanged(healthy, fenced("first"), nil)
	if len(sent) != 1 || reason(sent[0]) != "first" {
		t.Fatalf("the first fence: %v", types(sent))
	}
	for range 100 {
		sent = append(sent, e.WorkerChanged(fenced("flap"), healthy, nil)...)
		sent = append(sent, e.WorkerChanged(healthy, fenced("flap"), nil)...)
	}
	sent = append(sent, e.WorkerChanged(fenced("flap"), healthy, nil)...)
	sent = append(sent, e.WorkerChanged(healthy, fenced("last"), nil)...)
	var last store.OutboxEvent
	for last.ID == "" || reason(last) != "last" {
		select {
		case last = <-written:
			sent = append(sent, last)
		case <-time.After(10*time.Second + window):
			t.Fatalf("the latest fence was not sent when the window ended; sent %d", len(sent))
		}
	}
	if bound := 1 + int(time.Since(start)/window); len(sent) > bound {
		t.Fatalf("%d events in %s; at most %d with a %s window", len(sent), time.Since(start), bound, window)
	}

}

// Within a window the latest state wins: the last fence is what its end
// sends, and a GPU lifted by then sends nothing. (The window is an hour;
// the test ends it by hand.)
func TestGPUWindowLatestStateWins(t *testing.T) {
	t.Parallel()
	e := NewEmitter(nil)
	e.SetGPUEventWindow(time.Hour)
	var written []string
	e.SetHeldEventWriter(func(evs []store.OutboxEvent) {
		for _, ev := range evs {
			written = append(written, payloadOf(t, ev).GPU.Reason)
		}
	})
	t.Cleanup(e.Close)
	healthy := store.Worker{ID: "w_1", Name: "box", Status: protocol.WorkerIdle}
	fenced := func(reason string) store.Worker {
		w := healthy
		w.GPUConditions = []protocol.GPUCondition{{Index: 3, UUID: "GPU-3", State: protocol.GPUUnhealthy, Reason: reason}}
		return w
	}
	k := gpuKey{"w_1", 3}
	if n := len(e.WorkerChanged(healthy, fenced("opens"), nil)); n != 1 {
		t.Fatalf("the first fence made %d events", n)
	}
	for _, r := range []string{"b", "c"} {
		e.WorkerChanged(fenced("x"), healthy, nil)
		if n := len(e.WorkerChanged(healthy, fenced(r), nil)); n != 0 {
			t.Fatalf("a fence within the window made %d events at once", n)
		}
	}
	e.gpus.windowEnded(k)
	if len(written) != 1 || written[0] != "c" {
		t.Fatalf("the window's end wrote %q, want the latest fence", written)
	}
	// The next window: fenced, then lifted before its end.
	e.WorkerChanged(fenced("c"), healthy, nil)
	e.WorkerChanged(healthy, fenced("gone"), nil)
	e.WorkerChanged(fenced("gone"), healthy, nil)
	e.gpus.windowEnded(k)
	if len(written) != 1 {
		t.Fatalf("a lifted fence was written: %q", written)
	}
	if n := len(e.gpus.open); n != 0 {
		t.Fatalf("%d windows open after the last ended with nothing held", n)
	}
	if n := len(e.WorkerChanged(healthy, fenced("again"), nil)); n != 1 {
		t.Fatalf("a fence after the window made %d events", n)
	}
}
