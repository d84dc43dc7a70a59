package worker

import (
	"cmp"
	"fmt"
	"slices"
	"sync"

	"github.com/simpletuner/simpletuner-orchestration/internal/gpu"
	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
)

// A worker runs several jobs at once, each on GPUs of its own that the
// orchestrator assigns in job_submit's gpus, up to maxJobs. A job_submit
// without gpus comes from an orchestrator that gives a job the whole worker:
// it runs alone with every GPU.

// allotment is which running attempt holds which of the worker's slots and
// GPUs. It decides whether a dispatch fits beside the others (reserve),
// gives the attempt its share (a grant) and takes it back when the attempt
// ends (release). GPU sharing and MIG slices would change what a grant is
// and when a device is free here, and nowhere else.
//
// Its lock comes after the Worker's: the Worker holds its own around the
// release of an attempt whose report becomes outstanding, so a heartbeat
// never sees the attempt in neither list.
type allotment struct {
	health *gpuWatch // fenced and held GPUs are not free

	mu      sync.Mutex
	inv     gpu.Inventory
	maxJobs int                // how many may run at once (see effectiveMaxJobs)
	jobs    map[string]*runner // running attempts by job id
}

// grant is what an attempt was given of the worker: its GPUs, and whether it
// holds the whole worker (then devices is every GPU free when it came).
type grant struct {
	devices     []gpu.Device
	wholeWorker bool
	// otherNodes are the device files of the GPUs it was not given (its
	// cgroup keeps it from opening them) and env how it is told its own.
	otherNodes []string
	env        map[string]string
}

// has reports whether GPU i is one of the grant's.
func (g grant) has(i int) bool {
	return slices.ContainsFunc(g.devices, func(d gpu.Device) bool { return d.Index == i })
}

func newAllotment(health *gpuWatch) *allotment {
	return &allotment{health: health, maxJobs: 1, jobs: map[string]*runner{}}
}

// effectiveMaxJobs is [worker] max_jobs, or one job per GPU (one on a machine
// without GPUs) when it is not set.
func effectiveMaxJobs(configured int, inv gpu.Inventory) int {
	if configured > 0 {
		return configured
	}
	return max(1, len(inv.Devices))
}

// setInventory takes the GPUs read at start and sizes the slots.
func (al *allotment) setInventory(inv gpu.Inventory, configuredMaxJobs int) {
	al.mu.Lock()
	defer al.mu.Unlock()
	al.inv = inv
	al.maxJobs = effectiveMaxJobs(configuredMaxJobs, inv)
}

// inventory is the worker's GPUs and how many jobs may run at once.
func (al *allotment) inventory() (inv gpu.Inventory, maxJobs int) {
	al.mu.Lock()
	defer al.mu.Unlock()
	return al.inv, al.maxJobs
}

// running lists the running attempts in job id order.
func (al *allotment) running() []*runner {
	al.mu.Lock()
	defer al.mu.Unlock()
	out := make([]*runner, 0, len(al.jobs))
	for _, a := range al.jobs {
		out = append(out, a)
	}
	slices.SortFunc(out, func(a, b *runner) int { return cmp.Compare(a.jobID, b.jobID) })
	return out
}

// idle reports whether no attempt runs.
func (al *allotment) idle() bool {
	al.mu.Lock()
	defer al.mu.Unlock()
	return len(al.jobs) == 0
}

// holder is the running attempt of jobID, nil when none runs here.
func (al *allotment) holder(jobID string) *runner {
	al.mu.Lock()
	defer al.mu.Unlock()
	return al.jobs[jobID]
}

// isCurrent reports whether a is still the running attempt of its job.
func (al *allotment) isCurrent(a *runner) bool { return al.holder(a.jobID) == a }

// onGPU is the running attempt that holds GPU i; nil when none does.
func (al *allotment) onGPU(i int) *runner {
	al.mu.Lock()
	defer al.mu.Unlock()
	return al.holderOfLocked(i)
}

// anyStopping reports whether an attempt here is being stopped.
func (al *allotment) anyStopping() bool {
	al.mu.Lock()
	defer al.mu.Unlock()
	for _, a := range al.jobs {
		if a.stop != notStopped {
			return true
		}
	}
	return false
}

// reserve gives a the slot and GPUs its dispatch assigns and records it as
// its job's running attempt. It takes nothing when an attempt of the job
// runs here already (cur), or when the dispatch does not fit beside what
// runs (a non-empty refused: the orchestrator's acknowledgement deadline
// then gives the job back to the queue).
func (al *allotment) reserve(a *runner) (cur *runner, refused string) {
	al.mu.Lock()
	defer al.mu.Unlock()
	if cur := al.jobs[a.jobID]; cur != nil {
		return cur, ""
	}
	devs, wholeWorker, refused := al.fitLocked(a.ev)
	if refused != "" {
		return nil, refused
	}
	a.grant = al.grantLocked(devs, wholeWorker)
	al.jobs[a.jobID] = a
	return nil, ""
}

// release takes back a's slot and GPUs; an attempt no longer the running
// one of its job holds none.
func (al *allotment) release(a *runner) {
	al.mu.Lock()
	defer al.mu.Unlock()
	if al.jobs[a.jobID] == a {
		delete(al.jobs, a.jobID)
	}
}

// fitLocked checks a dispatch against what runs here and resolves the GPUs
// it assigns; wholeWorker is true for a dispatch that takes the whole worker.
func (al *allotment) fitLocked(ev *protocol.JobSubmitEvent) (devs []gpu.Device, wholeWorker bool, reason string) {
	if ev.GPUs == nil {
		if len(al.jobs) > 0 {
			return nil, true, fmt.Sprintf("it asks for the whole worker and %d job(s) run here", len(al.jobs))
		}
		return al.freeLocked(), true, ""
	}
	if len(al.jobs) >= al.maxJobs {
		return nil, false, fmt.Sprintf("max_jobs (%d) jobs run here already", al.maxJobs)
	}
	if ev.WholeWorker && len(al.jobs) > 0 {
		return nil, false, fmt.Sprintf("it takes the whole worker and %d job(s) run here", len(al.jobs))
	}
	for _, a := range al.jobs {
		if a.grant.wholeWorker {
			return nil, false, fmt.Sprintf("job %s runs with the whole worker", a.jobID)
		}
	}
	for _, g := range *ev.GPUs {
		d, ok := al.inv.Device(g.Index)
		switch {
		case !ok:
			return nil, false, fmt.Sprintf("it assigns GPU %d and this worker has %d", g.Index, len(al.inv.Devices))
		case g.UUID != "" && d.UUID != "" && g.UUID != d.UUID:
			return nil, false, fmt.Sprintf("it assigns GPU %d as %s, which is %s here", g.Index, g.UUID, d.UUID)
		case al.holderOfLocked(g.Index) != nil:
			return nil, false, fmt.Sprintf("GPU %d is in use by job %s", g.Index, al.holderOfLocked(g.Index).jobID)
		case al.health.unavailable(g.Index) != "":
			return nil, false, fmt.Sprintf("GPU %d is %s", g.Index, al.health.unavailable(g.Index))
		case slices.ContainsFunc(devs, func(x gpu.Device) bool { return x.Index == g.Index }):
			return nil, false, fmt.Sprintf("it assigns GPU %d twice", g.Index)
		}
		devs = append(devs, d)
	}
	return devs, ev.WholeWorker, ""
}

// freeLocked lists the GPUs a new attempt may be given: those no attempt
// holds and the GPU watcher has neither fenced nor held back.
func (al *allotment) freeLocked() []gpu.Device {
	var free []gpu.Device
	for _, d := range al.inv.Devices {
		if al.health.unavailable(d.Index) == "" && al.holderOfLocked(d.Index) == nil {
			free = append(free, d)
		}
	}
	return free
}

// holderOfLocked is the attempt that holds GPU i; nil when none does.
func (al *allotment) holderOfLocked(i int) *runner {
	for _, a := range al.jobs {
		if a.grant.has(i) {
			return a
		}
	}
	return nil
}

// grantLocked is the share of an attempt given devs: the device files of
// the other GPUs, which its cgroup keeps it from opening, and how it is told
// its own. A whole-worker attempt on a machine without GPUs leaves the
// inherited variables alone.
func (al *allotment) grantLocked(devs []gpu.Device, wholeWorker bool) grant {
	g := grant{devices: devs, wholeWorker: wholeWorker}
	for _, d := range al.inv.Devices {
		if d.DeviceNode != "" && !g.has(d.Index) {
			g.otherNodes = append(g.otherNodes, d.DeviceNode)
		}
	}
	if !wholeWorker || len(devs) > 0 {
		g.env = al.inv.JobEnv(devs)
	}
	return g
}
