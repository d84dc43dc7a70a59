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

// watchGPUs runs beside the loop: it passes on the driver's error events as
// they come and, every watch interval, checks the GPUs' health, releases
// held GPUs nothing is left on, and samples what the jobs use. It never
// blocks the loop on the driver.
func (w *Worker) watchGPUs(ctx context.Context) {
	defer w.wg.Done()
	events := w.opt.GPU.Events(ctx)
	t := time.NewTicker(w.opt.GPUWatchInterval)
	defer t.Stop()
	check := func() {
		for i, why := range w.gpus.checkHealth() {
			w.post(gpuFaulted{index: i, reason: why})
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
				w.post(gpuEvent{ev: ev})
			}
		case <-t.C:
			check()
			if released := w.gpus.recheckHeld(); len(released) > 0 {
				w.beatSoon()
			}
			if len(w.slots.running()) == 0 {
				continue
			}
			tel, err := w.opt.GPU.Telemetry()
			if err != nil {
				continue
			}
			procs, _ := w.opt.GPU.Processes()
			w.post(gpuSample{tel: tel, procs: procs})
		}
	}
}

// beatSoon asks for a heartbeat now, so the orchestrator learns of a change
// of the GPUs without waiting for the next beat.
func (w *Worker) beatSoon() {
	select {
	case w.hbNow <- struct{}{}:
	default:
	}
}

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
	w.beatSoon()
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

// clearFences lifts the fences an admin cleared.
func (w *Worker) clearFences(indices []int) {
	cleared := false
	for _, i := range indices {
		cleared = w.gpus.clear(i) || cleared
	}
	if cleared {
		w.beatSoon()
	}
}
