package webhook

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/store"
)

// DefaultGPUEventWindow is how far apart two gpu.unhealthy events of one
// GPU are at least.
const DefaultGPUEventWindow = time.Minute

// gpuGate spaces out the gpu.unhealthy events of each GPU (a worker and an
// index): at most one per window. A GPU's first fence is sent at once and
// opens its window; a fence of the same GPU within the window is held, the
// latest one replacing an earlier one, and sent when the window ends,
// which opens the next window. A GPU no longer unhealthy drops the held
// event: the latest state wins, and a GPU back in use has no event. So a
// worker that flips its GPUs' conditions in every heartbeat makes one
// event per GPU and window, not one per heartbeat.
//
// The gate lives in memory, per orchestrator instance. It is consulted
// inside the store's transaction; should that transaction fail, the fence
// was not stored either, the worker reports it again, and it is held and
// sent when the window ends: late, never lost.
type gpuGate struct {
	window atomic.Int64 // nanoseconds
	// send writes events that no change carries (the held ones) in a
	// transaction of their own; nil: held events are dropped.
	send atomic.Pointer[func([]store.OutboxEvent)]

	mu     sync.Mutex
	open   map[gpuKey]*gpuWindow
	closed bool
}

type gpuKey struct {
	worker string
	index  int
}

// gpuWindow is a GPU's open window: the event held for its end, if any.
type gpuWindow struct {
	held  *store.OutboxEvent
	timer *time.Timer
}

func newGPUGate() *gpuGate {
	g := &gpuGate{open: map[gpuKey]*gpuWindow{}}
	g.window.Store(int64(DefaultGPUEventWindow))
	return g
}

// admit reports whether the fence event ev of GPU k goes out now; if not,
// it is held for the end of k's window.
func (g *gpuGate) admit(k gpuKey, ev store.OutboxEvent) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return true
	}
	if w, ok := g.open[k]; ok {
		w.held = &ev
		return false
	}
	g.open[k] = &gpuWindow{timer: time.AfterFunc(g.windowLength(), func() { g.windowEnded(k) })}
	return true
}

// lifted drops what GPU k holds: it is no longer unhealthy.
func (g *gpuGate) lifted(k gpuKey) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if w, ok := g.open[k]; ok {
		w.held = nil
	}
}

// windowEnded sends what GPU k held, opening its next window, or forgets k.
func (g *gpuGate) windowEnded(k gpuKey) {
	g.mu.Lock()
	w, ok := g.open[k]
	if !ok || g.closed {
		g.mu.Unlock()
		return
	}
	if w.held == nil {
		delete(g.open, k)
		g.mu.Unlock()
		return
	}
	ev := *w.held
	w.held = nil
	w.timer.Reset(g.windowLength())
	g.mu.Unlock()
	if send := g.send.Load(); send != nil {
		(*send)([]store.OutboxEvent{ev})
	}
}

func (g *gpuGate) windowLength() time.Duration { return time.Duration(g.window.Load()) }

// close stops the windows; what they hold is dropped.
func (g *gpuGate) close() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.closed = true
	for k, w := range g.open {
		w.timer.Stop()
		delete(g.open, k)
	}
}
