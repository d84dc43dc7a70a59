package worker

import (
	"context"
	"fmt"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/gpu"
	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
)

// Messages from the GPU watcher to the loop.
type (
	// gpuEvent: the driver raised an error on a GPU.
	gpuEvent struct{ ev gpu.Event }
	// gpuFaulted: a health check found a hardware fault on a GPU.
	gpuFaulted struct {
		index  int
		reason string
	}
	// gpuSample: the GPUs' numbers and processes, for the running jobs'
	// accounting.
	gpuSample struct {
		tel   []protocol.GPUTelemetry
		procs map[int][]gpu.Process
	}
)

// onGPUEvent: an XID that blames the hardware fences the GPU; any other is
// the job's own and goes into its record and its log.
func (w *Worker) onGPUEvent(ev gpu.Event) {
	what := ev.Describe()
	if ev.Hardware() {
		w.onGPUFault(ev.Index, what)
		return
	}
	a := w.slots.onGPU(ev.Index)
	if a == nil {
		w.log.Warn("GPU error with no job on the GPU", "index", ev.Index, "uuid", ev.UUID, "error", what)
		return
	}
	a.gpus.onError(ev, what)
}

// onGPUFault fences GPU i and stops the attempt on it with its grace: the
// machine failed, not the job, which is requeued without spending a retry.
func (w *Worker) onGPUFault(i int, reason string) {
	if !w.gpus.fence(i, reason) {
		return
	}
	w.beats.soon()
	a := w.slots.onGPU(i)
	if a == nil {
		return
	}
	detail := fmt.Sprintf("GPU %d is unhealthy: %s", i, reason)
	a.gpus.onFault(i, reason, detail)
	w.stopJob(a, stopGPUFault, detail, a.grace)
}

// onGPUSample adds a sample to each running attempt's GPU accounting.
func (w *Worker) onGPUSample(s gpuSample) {
	byIndex := map[int]protocol.GPUTelemetry{}
	for _, t := range s.tel {
		byIndex[t.Index] = t
	}
	for _, a := range w.slots.running() {
		a.gpus.sample(byIndex, s.procs)
	}
}

// clearFences lifts the fences an admin cleared; it reports whether one
// was lifted.
func (g *gpuWatch) clearFences(indices []int) bool {
	cleared := false
	for _, i := range indices {
		cleared = g.clear(i) || cleared
	}
	return cleared
}

// run runs beside the loop: it passes on the driver's error events as they
// come and, every watch interval, checks the GPUs' health, releases held
// GPUs nothing is left on (then changed is called), and, while busy says
// jobs run, samples what they use. It never blocks the loop on the driver.
func (g *gpuWatch) run(ctx context.Context, every time.Duration, post func(any), changed func(), busy func() bool) {
	events := g.src.Events(ctx)
	t := time.NewTicker(every)
	defer t.Stop()
	check := func() {
		for i, why := range g.checkHealth() {
			post(gpuFaulted{index: i, reason: why})
		}
	}
	for {
		select {
		case <-ctx.Done():
			return
		case ev, ok := <-events:
			switch {
			case !ok:
				events = nil
			case ev.Lost || ev.Index < 0:
				check() // the health check tells which GPU
			default:
				post(gpuEvent{ev: ev})
			}
		case <-t.C:
			check()
			if released := g.recheckHeld(); len(released) > 0 {
				changed()
			}
			if !busy() {
				continue
			}
			tel, err := g.src.Telemetry()
			if err != nil {
				continue
			}
			procs, _ := g.src.Processes()
			post(gpuSample{tel: tel, procs: procs})
		}
	}
}
