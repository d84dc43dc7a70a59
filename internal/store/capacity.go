package store

import (
	"github.com/simpletuner/simpletuner-orchestration/internal/lifecycle"
	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
)

// Capacity is what a worker row says about its room for attempts: the rules
// placement, the claim and the worker's status all apply, read off the row
// in one place so that they agree. Worker records; Capacity decides.
type Capacity struct {
	Protocol int
	MaxJobs  int // the max_jobs capability; 0 when the worker did not report one
	GPUs     int // its GPUs, as reported
	// Running, GPUsUsed and WholeWorkerHeld are Worker's: the attempts out on it,
	// the GPUs they hold, and whether one of them took the whole worker.
	Running, GPUsUsed int
	WholeWorkerHeld   bool
	// GPUConditions are the GPUs the worker keeps out of use.
	GPUConditions []protocol.GPUCondition
}

// Capacity reads the worker's room for attempts off its row.
func (w Worker) Capacity() Capacity {
	return Capacity{Protocol: w.Protocol, MaxJobs: w.Capabilities.MaxJobs, GPUs: w.GPUInfo.Count,
		Running: w.Running, GPUsUsed: w.GPUsUsed, WholeWorkerHeld: w.WholeWorkerHeld, GPUConditions: w.GPUConditions}
}

// Slots is how many attempts the worker may run at once: its max_jobs when
// it runs several jobs on GPUs the orchestrator assigns, else 1 (a job then
// gets the whole worker).
func (c Capacity) Slots() int {
	if c.SharesGPUs() {
		return c.MaxJobs
	}
	return 1
}

// SharesGPUs reports whether the worker runs several jobs, each on GPUs of
// its own.
func (c Capacity) SharesGPUs() bool { return c.Protocol >= 2 && c.MaxJobs > 0 }

// Load is the worker's load for the lifecycle's status rule.
func (c Capacity) Load() lifecycle.Load {
	return lifecycle.Load{Running: c.Running, Slots: c.Slots(), GPUs: c.GPUs, GPUsUsed: c.GPUsUsed, WholeWorker: c.WholeWorkerHeld}
}

// FreeUsableGPUs is how many of the worker's GPUs no attempt holds and the
// worker does not keep out of use (a GPU both held by an attempt and kept
// out of use, briefly, counts once each way: the figure errs low).
func (c Capacity) FreeUsableGPUs() int { return max(c.Load().FreeGPUs()-len(c.GPUConditions), 0) }

// UnavailableGPUs are the indices of the worker's GPUs it keeps out of use
// (held or unhealthy).
func (c Capacity) UnavailableGPUs() map[int]bool {
	out := make(map[int]bool, len(c.GPUConditions))
	for _, gc := range c.GPUConditions {
		out[gc.Index] = true
	}
	return out
}
