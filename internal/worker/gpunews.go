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
	a.gpuError(ev, what)
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
	a.gpuFaulted(i, reason, detail)
	w.stopJob(a, stopGPUFault, detail, a.grace)
}

// onGPUSample adds a sample to each running attempt's GPU accounting.
func (w *Worker) onGPUSample(s gpuSample) {
	byIndex := map[int]protocol.GPUTelemetry{}
	for _, t := range s.tel {
		byIndex[t.Index] = t
	}
	for _, a := range w.slots.running() {
		a.sampleGPUs(byIndex, s.procs)
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

// gpuError records a driver error on one of the attempt's GPUs that is the
// job's own, in its report and its log.
func (r *runner) gpuError(ev gpu.Event, what string) {
	note := fmt.Sprintf("%s on GPU %d at %s", what, ev.Index, protocol.Time(ev.At))
	r.gpuEvents = append(r.gpuEvents, note)
	r.log.Warn("the job's GPU raised an error", "gpu", ev.Index, "error", what)
	if r.spool != nil {
		_, _ = r.spool.Write([]byte("simpletuner-workerd: " + note + "\n"))
	}
}

// gpuFaulted tells the job's log that GPU i failed under it, and keeps the
// fault for its report unless it is being stopped for something else; the
// loop stops it next.
func (r *runner) gpuFaulted(i int, reason, detail string) {
	if r.spool != nil {
		_, _ = r.spool.Write([]byte("simpletuner-workerd: " + detail + "; stopping the job, which is requeued\n"))
	}
	if r.stop == notStopped || r.stop == stopGPUFault {
		r.fault = &protocol.GPUFault{GPUs: []int{i}, Reason: reason}
	}
}

// sampleGPUs adds a sample to the attempt's GPU accounting: the mean
// utilisation of its GPUs, and the GPU memory its own processes hold (those
// in its cgroup, or its process group without one).
func (r *runner) sampleGPUs(byIndex map[int]protocol.GPUTelemetry, procs map[int][]gpu.Process) {
	if len(r.grant.devices) == 0 || r.proc == nil {
		return
	}
	var util float64
	var mem uint64
	for _, d := range r.grant.devices {
		util += byIndex[d.Index].UtilizationPct
		for _, p := range procs[d.Index] {
			if r.proc.job.Contains(p.PID) {
				mem += p.UsedBytes
			}
		}
	}
	r.use.add(util/float64(len(r.grant.devices)), mem)
}

// holdDirtyGPUs runs once the attempt ended, before its report frees its
// GPUs at the orchestrator: one the job left a process on is held back
// first, and the report says so.
func (r *runner) holdDirtyGPUs() {
	if len(r.grant.devices) == 0 || r.proc == nil {
		return
	}
	if held := r.env.gpus.holdLeftovers(r.grant.devices, r.env.opt.Timers.GPUSettle); len(held) > 0 {
		r.log.Warn("the job's GPUs are not clean after it ended; holding them back", "gpus", held)
	}
}

// gpuUse is what an attempt used of its GPUs, sampled every watch interval.
type gpuUse struct {
	samples  int
	utilSum  float64
	peakMem  uint64
	measured bool // a sample was taken: the driver reports utilisation
}

func (u *gpuUse) add(utilPct float64, mem uint64) {
	u.samples++
	u.utilSum += utilPct
	u.peakMem = max(u.peakMem, mem)
	u.measured = true
}

// fill adds the GPU part of an ended attempt's usage: GPU-seconds for the
// GPUs it held over the time it ran, and what the samples saw.
func (u *gpuUse) fill(usage *protocol.Usage, gpus int, ran time.Duration) {
	usage.GPUSeconds = float64(gpus) * ran.Seconds()
	usage.PeakGPUMemoryBytes = u.peakMem
	if u.measured {
		mean := u.utilSum / float64(u.samples)
		usage.GPUUtilizationPct = &mean
	}
}
