package adminapi

import (
	"context"
	"fmt"

	"github.com/simpletuner/simpletuner-orchestration/internal/lifecycle"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator/placement"
	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
	"github.com/simpletuner/simpletuner-orchestration/internal/store"
)

// Why a queued job waits, as GET /api/queue/{id} shows it.
const (
	WaitNoWorkerLargeEnough = "no_worker_large_enough" // no worker has gpu_count GPUs
	WaitNoMatchingWorker    = "no_matching_worker"     // no worker meets target, labels, GPUs and VRAM
	WaitNoneOnline          = "no_matching_worker_online"
	WaitWorkersBusy         = "workers_busy" // matching workers are online but have no free slot or are draining
	WaitGPUsBusy            = "gpus_busy"    // matching workers have a slot but not enough free GPUs
	WaitReserved            = "reserved_for" // the workers that fit it now are held for another job
	WaitQueuedBehind        = "queued_behind"
	WaitDispatching         = "dispatching"    // first in line with a free matching worker: a claim is imminent
	WaitTeamGPULimit        = "team_gpu_limit" // its team holds its max_gpus
)

// workerFacts is what explaining a wait reads of one worker: read once, it
// serves every queued job of a list.
type workerFacts struct {
	w         store.Worker
	status    protocol.WorkerStatus
	connected bool
}

// workerFacts reads every worker's facts.
func (a *API) workerFacts(ctx context.Context) ([]workerFacts, error) {
	var out []workerFacts
	err := store.EachWorker(ctx, a.store, func(w store.Worker) {
		status, connected := a.workers.Shown(w)
		out = append(out, workerFacts{w: w, status: status, connected: connected})
	})
	return out, err
}

// waiting explains why a queued job has not started: the first of the
// reasons above that holds, with a sentence for people.
func (a *API) waiting(ctx context.Context, j store.Job) (reason, detail string, err error) {
	facts, err := a.workerFacts(ctx)
	if err != nil {
		return "", "", err
	}
	return a.explainWait(ctx, j, facts)
}

// explainWait is waiting on workers' facts read before.
func (a *API) explainWait(ctx context.Context, j store.Job, facts []workerFacts) (reason, detail string, err error) {
	var large, matching, online, room, fits, fitsReserved int
	maxGPUs := 0
	res := a.scheduler.Reservation()
	for _, f := range facts {
		w, status := f.w, f.status
		gpus := f.w.GPUInfo.Count
		maxGPUs = max(maxGPUs, gpus)
		if gpus >= j.GPUCount {
			large++
		}
		if !placement.Matches(j.Queued(), w) {
			continue
		}
		matching++
		if !f.connected || status == protocol.WorkerDisconnected || status == protocol.WorkerOffline {
			continue
		}
		online++
		capa := w.Capacity()
		load := capa.Load()
		// A GPU-sharing worker that is full because its GPUs are taken is
		// short of GPUs, not of slots: the job waits for GPUs. A job that
		// takes the whole worker waits for one running nothing.
		if capa.SharesGPUs() && status != protocol.WorkerDraining &&
			(capa.FreeUsableGPUs() < j.GPUCount || (j.WholeWorker && (load.Running > 0 || (gpus > 0 && capa.FreeUsableGPUs() == 0)))) {
			room++
			continue
		}
		if !lifecycle.CanClaim(status, load) {
			continue
		}
		room++
		fits++
		if res.WorkerID == w.ID && res.JobID != j.ID {
			fitsReserved++
		}
	}
	if detail, err := a.teamLimitWait(ctx, j); err != nil || detail != "" {
		return WaitTeamGPULimit, detail, err
	}
	switch {
	case large == 0:
		return WaitNoWorkerLargeEnough, fmt.Sprintf("it asks for %d GPUs; the largest worker has %d", j.GPUCount, maxGPUs), nil
	case matching == 0:
		return WaitNoMatchingWorker, "no worker meets its target, labels, GPU count and VRAM", nil
	case online == 0:
		return WaitNoneOnline, fmt.Sprintf("%d matching worker(s), none connected", matching), nil
	case res.JobID == j.ID && j.WholeWorker:
		return WaitGPUsBusy, fmt.Sprintf("it takes a whole worker and waits for worker %s to finish its jobs; the worker is held for it: no other job starts there", res.WorkerID), nil
	case res.JobID == j.ID && j.GPUCount == 0:
		return WaitWorkersBusy, fmt.Sprintf("it waits for a free job slot on worker %s, which is held for it: no other job starts there", res.WorkerID), nil
	case res.JobID == j.ID:
		return WaitGPUsBusy, fmt.Sprintf("it waits for %d free GPU(s) on worker %s, which is held for it: no other job starts there", j.GPUCount, res.WorkerID), nil
	case room == 0:
		return WaitWorkersBusy, fmt.Sprintf("%d matching worker(s) online, all busy or draining", online), nil
	case fits == 0 && j.WholeWorker:
		return WaitGPUsBusy, fmt.Sprintf("it takes a whole worker; %d matching worker(s) are online, each running other jobs", room), nil
	case fits == 0:
		return WaitGPUsBusy, fmt.Sprintf("%d matching worker(s) have room for a job, none has %d free GPU(s)", room, j.GPUCount), nil
	case fits == fitsReserved:
		return WaitReserved, fmt.Sprintf("the worker with room for it (%s) is held for job %s, which is ahead of it", res.WorkerID, res.JobID), nil
	}
	pos, err := a.store.QueuePosition(ctx, j.Priority, j.Seq)
	if err != nil {
		return "", "", err
	}
	if pos > 0 {
		return WaitQueuedBehind, fmt.Sprintf("%d job(s) ahead of it in the queue", pos), nil
	}
	return WaitDispatching, "a matching worker is free; it starts within a scheduler pass", nil
}
