// Package placement decides where queued jobs go: which workers could ever
// run a job, which have room for it now and with which GPUs, the best fit
// among them, and the worker held for a job no worker has room for. It makes
// no claim and sends nothing: the orchestrator's scheduler claims what it
// decides, in the store, and dispatches it.
//
//   - Best fit: among the workers with room for the job now, the one left
//     with the fewest free GPUs (remote workers before local ones for an
//     "auto" job), so large gaps stay whole for large jobs. A job never
//     spans workers.
//   - No starvation: when the first job of the highest priority that cannot
//     be placed has a worker large enough, that worker is reserved for it
//     (the one with the most free GPUs already): no other job starts there
//     until it is placed or leaves the queue. There is no backfill.
package placement

import (
	"path"

	"github.com/simpletuner/simpletuner-orchestration/internal/lifecycle"
	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
	"github.com/simpletuner/simpletuner-orchestration/internal/store"
)

// Matches reports whether worker w could ever run job j: target, GPU count,
// VRAM and every label glob. Whether it has room now is Fit's question.
func Matches(j store.QueuedJob, w store.Worker) bool {
	g := w.GPUInfo.GPUSummary
	switch j.Target {
	case protocol.TargetWorker:
		if w.Local {
			return false
		}
	case protocol.TargetLocal:
		if !w.Local {
			return false
		}
	}
	if j.GPUCount > 0 && len(eligibleGPUs(g, j)) < j.GPUCount {
		return false
	}
	if j.MinVRAMGB > 0 && !w.Capacity().SharesGPUs() && g.VRAMGB < j.MinVRAMGB {
		return false
	}
	// A job that takes the whole worker needs every GPU of it large enough.
	if j.WholeWorker && j.MinVRAMGB > 0 && len(eligibleGPUs(g, j)) < len(g.Devices) {
		return false
	}
	for key, glob := range j.WorkerLabels {
		v, ok := w.Labels[key]
		if !ok {
			return false
		}
		if m, err := path.Match(glob, v); err != nil || !m {
			return false
		}
	}
	return true
}

// eligibleGPUs lists the worker's GPUs with at least the job's min_vram_gb.
func eligibleGPUs(g protocol.GPUSummary, j store.QueuedJob) []protocol.GPUDevice {
	var out []protocol.GPUDevice
	for _, d := range g.Devices {
		vram := d.VRAMGB()
		if d.MemoryMiB == 0 {
			vram = g.VRAMGB // an agent that reports one size for all
		}
		if vram >= j.MinVRAMGB {
			out = append(out, d)
		}
	}
	return out
}

// Candidate is a worker as placement sees it during one pass: its GPUs no
// attempt holds and the worker does not keep out of use, and its load, both
// updated by what the pass already gave it.
type Candidate struct {
	W    store.Worker
	free map[int]bool
	load lifecycle.Load
	pos  int // in the pool's order
}

// NewCandidate makes w a candidate; leased are the GPUs its attempts hold.
func NewCandidate(w store.Worker, leased []store.GPULease) *Candidate {
	capa := w.Capacity()
	c := &Candidate{W: w, free: map[int]bool{}, load: capa.Load()}
	unavailable := capa.UnavailableGPUs()
	for _, d := range w.GPUInfo.Devices {
		if !unavailable[d.Index] {
			c.free[d.Index] = true
		}
	}
	for _, l := range leased {
		delete(c.free, l.Index)
	}
	return c
}

// HasRoom reports whether the worker could still take a job.
func (c *Candidate) HasRoom() bool { return lifecycle.CanClaim(c.W.Status, c.load) }

// Fit is the GPUs c would give j now, or ok false when it has no room for
// it. A worker that runs one job at a time gives a job all its GPUs. A job
// that takes the whole worker needs one running nothing, and gets every GPU
// of it that is not kept out of use (at least one, on a worker with GPUs).
func (c *Candidate) Fit(j store.QueuedJob) (gpus []int, ok bool) {
	if !c.HasRoom() {
		return nil, false
	}
	devices := c.W.GPUInfo.Devices
	if !c.W.Capacity().SharesGPUs() {
		for _, d := range devices {
			gpus = append(gpus, d.Index)
		}
		return gpus, true
	}
	if j.WholeWorker {
		if c.load.Running > 0 {
			return nil, false
		}
		for _, d := range devices {
			if c.free[d.Index] {
				gpus = append(gpus, d.Index)
			}
		}
		return gpus, len(gpus) > 0 || len(devices) == 0
	}
	for _, d := range eligibleGPUs(c.W.GPUInfo.GPUSummary, j) {
		if len(gpus) == j.GPUCount {
			break
		}
		if c.free[d.Index] {
			gpus = append(gpus, d.Index)
		}
	}
	return gpus, len(gpus) == j.GPUCount
}

// Took records that the pass gave j the GPUs gpus of c.
func (c *Candidate) Took(j store.QueuedJob, gpus []int) {
	for _, g := range gpus {
		delete(c.free, g)
	}
	c.load.Running++
	c.load.GPUsUsed += len(gpus)
	c.load.WholeWorker = j.WholeWorker
	if c.load.Full() {
		c.W.Status = protocol.WorkerBusy
	} else {
		c.W.Status = protocol.WorkerPartial
	}
}

// Reservation holds a worker for the job at the head of the highest
// priority that could not be placed; the zero value holds none.
type Reservation struct{ JobID, WorkerID string }

// BestFit picks, among the workers that match j, have room for it now and
// are not held for another job, the one left with the fewest free GPUs:
// remote before local, then ties to the one running fewer attempts. It reads
// more of the pool only until a remote worker fits exactly.
func BestFit(j store.QueuedJob, p *Pool, res Reservation) (*Candidate, []int) {
	var best *Candidate
	var bestGPUs []int
	bestLeft := 0
	consider := func(c *Candidate) {
		if (res.WorkerID == c.W.ID && res.JobID != j.ID) || !Matches(j, c.W) {
			return
		}
		gpus, ok := c.Fit(j)
		if !ok {
			return
		}
		left := len(c.free) - len(gpus)
		if best == nil || (best.W.Local && !c.W.Local) ||
			(best.W.Local == c.W.Local && (left < bestLeft || (left == bestLeft && c.load.Running < best.load.Running))) {
			best, bestGPUs, bestLeft = c, gpus, left
		}
	}
	for _, c := range p.read {
		consider(c)
	}
	for best == nil || bestLeft > 0 || best.W.Local {
		c := p.more()
		if c == nil {
			break
		}
		consider(c)
	}
	return best, bestGPUs
}

// ReserveFor holds for j the worker that will fit it soonest: among the
// pool's workers that could ever run it, the one with the most free GPUs
// already (ties to the first in the pool).
func ReserveFor(j store.QueuedJob, p *Pool) Reservation {
	p.readAll()
	var best *Candidate
	for _, c := range p.read {
		if !Matches(j, c.W) {
			continue
		}
		if best == nil || len(c.free) > len(best.free) ||
			(len(c.free) == len(best.free) && c.pos < best.pos) {
			best = c
		}
	}
	if best == nil {
		return Reservation{}
	}
	return Reservation{JobID: j.ID, WorkerID: best.W.ID}
}
