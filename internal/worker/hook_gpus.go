package worker

import (
	"context"
	"fmt"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/gpu"
	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
)

// gpuHook is what the attempt meets on its GPUs: its sampled use, the
// errors the driver raised that are its own, the hardware fault it was
// stopped for; and, once it ended, that the GPUs it leaves are clean. The
// loop passes it the GPU watcher's news (gpunews.go).
type gpuHook struct {
	a      *runner
	use    gpuUse
	events []string
	fault  *protocol.GPUFault
}

// onError records a driver error on one of the attempt's GPUs that is the
// job's own, in its report and its log.
func (h *gpuHook) onError(ev gpu.Event, what string) {
	note := fmt.Sprintf("%s on GPU %d at %s", what, ev.Index, protocol.Time(ev.At))
	h.events = append(h.events, note)
	h.a.log.Warn("the job's GPU raised an error", "gpu", ev.Index, "error", what)
	h.a.logs.note("simpletuner-workerd: " + note + "\n")
}

// onFault tells the job's log that GPU i failed under it, and keeps the
// fault for its report unless it is being stopped for something else; the
// loop stops it next.
func (h *gpuHook) onFault(i int, reason, detail string) {
	h.a.logs.note("simpletuner-workerd: " + detail + "; stopping the job, which is requeued\n")
	if h.a.stop == notStopped || h.a.stop == stopGPUFault {
		h.fault = &protocol.GPUFault{GPUs: []int{i}, Reason: reason}
	}
}

// sample adds a sample to the attempt's GPU accounting: the mean
// utilisation of its GPUs, and the GPU memory its own processes hold (those
// in its cgroup, or its process group without one).
func (h *gpuHook) sample(byIndex map[int]protocol.GPUTelemetry, procs map[int][]gpu.Process) {
	a := h.a
	devs := a.grant.devices
	if len(devs) == 0 || a.proc == nil {
		return
	}
	var util float64
	var mem uint64
	for _, d := range devs {
		util += byIndex[d.Index].UtilizationPct
		for _, p := range procs[d.Index] {
			if a.proc.job.Contains(p.PID) {
				mem += p.UsedBytes
			}
		}
	}
	h.use.add(util/float64(len(devs)), mem)
}

// fill adds to the terminal report what the attempt used of its GPUs and
// the errors they raised.
func (h *gpuHook) fill(usage *protocol.Usage, ran time.Duration) {
	usage.GPUEvents = h.events
	h.use.fill(usage, len(h.a.grant.devices), ran)
}

// postrun runs once the attempt ended, before its report frees its GPUs at
// the orchestrator: one the job left a process on is held back first, and
// the report says so.
func (h *gpuHook) postrun(context.Context, *attemptEnd) {
	a := h.a
	if len(a.grant.devices) == 0 || a.proc == nil {
		return
	}
	if held := a.env.gpus.holdLeftovers(a.grant.devices, a.env.opt.Timers.GPUSettle); len(held) > 0 {
		a.log.Warn("the job's GPUs are not clean after it ended; holding them back", "gpus", held)
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
