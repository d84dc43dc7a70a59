package worker

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/simpletuner/simpletuner-orchestration/internal/gpu"
	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
)

// A worker runs several jobs at once, each on GPUs of its own that the
// orchestrator assigns in job_submit's gpus, up to maxJobs. A job_submit
// without gpus comes from an orchestrator that gives a job the whole worker:
// it runs alone with every GPU.

// effectiveMaxJobs is [worker] max_jobs, or one job per GPU (one on a machine
// without GPUs) when it is not set.
func effectiveMaxJobs(configured int, inv gpu.Inventory) int {
	if configured > 0 {
		return configured
	}
	return max(1, len(inv.Devices))
}

// runningLocked lists the running attempts in job id order. w.mu is held.
func (w *Worker) runningLocked() []*runner {
	out := make([]*runner, 0, len(w.jobs))
	for _, a := range w.jobs {
		out = append(out, a)
	}
	slices.SortFunc(out, func(a, b *runner) int { return cmp.Compare(a.jobID, b.jobID) })
	return out
}

// running is runningLocked for callers without the lock.
func (w *Worker) running() []*runner {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.runningLocked()
}

// attemptOf is the running attempt of jobID, nil when none runs here.
func (w *Worker) attemptOf(jobID string) *runner {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.jobs[jobID]
}

// isCurrent reports whether a is still the running attempt of its job.
func (w *Worker) isCurrent(a *runner) bool { return w.attemptOf(a.jobID) == a }

// gpusForLocked checks a dispatch against what runs here and resolves the GPUs it
// assigns; whole is true for a dispatch that takes the whole worker. A
// non-empty reason refuses it: the orchestrator's acknowledgement deadline
// then gives the job back to the queue. w.mu is held.
func (w *Worker) gpusForLocked(ev *protocol.JobSubmitEvent) (devs []gpu.Device, whole bool, reason string) {
	if ev.GPUs == nil {
		if len(w.jobs) > 0 {
			return nil, true, fmt.Sprintf("it asks for the whole worker and %d job(s) run here", len(w.jobs))
		}
		for _, d := range w.inv.Devices {
			if w.gpus.unavailable(d.Index) == "" {
				devs = append(devs, d)
			}
		}
		return devs, true, ""
	}
	if len(w.jobs) >= w.maxJobs {
		return nil, false, fmt.Sprintf("max_jobs (%d) jobs run here already", w.maxJobs)
	}
	if ev.WholeWorker && len(w.jobs) > 0 {
		return nil, false, fmt.Sprintf("it takes the whole worker and %d job(s) run here", len(w.jobs))
	}
	used := map[int]string{}
	for _, a := range w.jobs {
		if a.whole {
			return nil, false, fmt.Sprintf("job %s runs with the whole worker", a.jobID)
		}
		for _, d := range a.gpus {
			used[d.Index] = a.jobID
		}
	}
	for _, g := range *ev.GPUs {
		d, ok := w.inv.Device(g.Index)
		switch {
		case !ok:
			return nil, false, fmt.Sprintf("it assigns GPU %d and this worker has %d", g.Index, len(w.inv.Devices))
		case g.UUID != "" && d.UUID != "" && g.UUID != d.UUID:
			return nil, false, fmt.Sprintf("it assigns GPU %d as %s, which is %s here", g.Index, g.UUID, d.UUID)
		case used[g.Index] != "":
			return nil, false, fmt.Sprintf("GPU %d is in use by job %s", g.Index, used[g.Index])
		case w.gpus.unavailable(g.Index) != "":
			return nil, false, fmt.Sprintf("GPU %d is %s", g.Index, w.gpus.unavailable(g.Index))
		case slices.ContainsFunc(devs, func(x gpu.Device) bool { return x.Index == g.Index }):
			return nil, false, fmt.Sprintf("it assigns GPU %d twice", g.Index)
		}
		devs = append(devs, d)
	}
	return devs, ev.WholeWorker, ""
}

// otherGPUNodes lists the device files of the GPUs a was not given: its
// cgroup keeps it from opening them.
func (w *Worker) otherGPUNodes(a *runner) []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []string
	for _, d := range w.inv.Devices {
		if d.DeviceNode != "" && !slices.ContainsFunc(a.gpus, func(g gpu.Device) bool { return g.Index == d.Index }) {
			out = append(out, d.DeviceNode)
		}
	}
	return out
}

// gpuEnv is how the attempt is told its GPUs. A whole-worker attempt on a
// machine without GPUs leaves the inherited variables alone.
func (w *Worker) gpuEnv(a *runner) map[string]string {
	w.mu.Lock()
	defer w.mu.Unlock()
	if a.whole && len(a.gpus) == 0 {
		return nil
	}
	return w.inv.JobEnv(a.gpus)
}
