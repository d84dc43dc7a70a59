package fairshare

import (
	"slices"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/store"
)

// Host is a worker that could run a waiting job once some of its attempts
// stop.
type Host struct {
	WorkerID string
	// GPUs is how many GPUs it has in use or free (not kept out of use);
	// FreeGPUs how many of them no attempt holds.
	GPUs, FreeGPUs int
	// SharesGPUs: it runs several jobs, each on GPUs of its own; otherwise
	// a job takes it whole.
	SharesGPUs bool
	Running    []store.ActiveAttempt
}

// Choice is what the scheduler preempts for a waiting job: attempts on one
// worker, and why.
type Choice struct {
	WorkerID string
	Victims  []store.ActiveAttempt
	Why      string
}

// Victims chooses, for waiting job j, the worker and the attempts on it to
// preempt: the fewest that make room for j, the most recently started
// first (they lose the least work), among those j may preempt (Why,
// Preemptible) without taking a team below what it keeps (MayLose). ok is
// false when no worker can make room within those rules, or when j's own
// team could not take the room for its max_gpus. hosts must be workers that
// could ever run j.
func (s *Standing) Victims(j store.QueuedJob, hosts []Host) (c Choice, ok bool) {
	var best Choice
	var bestOldest time.Time
	for _, h := range hosts {
		if s.OverLimit(j, JobGPUs(j, h.GPUs)) {
			continue
		}
		victims, why, fits := s.victimsOn(j, h)
		if !fits {
			continue
		}
		oldest := s.Now
		for _, v := range victims {
			if v.StartedAt.Before(oldest) {
				oldest = *v.StartedAt
			}
		}
		if !ok || len(victims) < len(best.Victims) || (len(victims) == len(best.Victims) && oldest.After(bestOldest)) {
			best, bestOldest, ok = Choice{WorkerID: h.WorkerID, Victims: victims, Why: why}, oldest, true
		}
	}
	return best, ok
}

// victimsOn chooses the victims on one worker; fits is false when stopping
// every attempt j may preempt there would still leave no room.
func (s *Standing) victimsOn(j store.QueuedJob, h Host) (victims []store.ActiveAttempt, why string, fits bool) {
	var may []store.ActiveAttempt
	whys := map[string]string{}
	for _, a := range h.Running {
		if w := s.Why(j, a); w != "" && s.Preemptible(a) {
			may = append(may, a)
			whys[a.JobID] = w
		}
	}
	if len(may) == 0 {
		return nil, "", false
	}
	// The most recently started first.
	slices.SortFunc(may, func(a, b store.ActiveAttempt) int { return b.StartedAt.Compare(*a.StartedAt) })
	losing := map[string]int{}
	take := func(a store.ActiveAttempt) bool {
		if !s.MayLose(a.Team, losing[a.Team]+a.GPUs) {
			return false
		}
		losing[a.Team] += a.GPUs
		victims = append(victims, a)
		return true
	}
	if j.WholeWorker || !h.SharesGPUs {
		// Only a worker running nothing takes j: every attempt must go.
		if len(may) < len(h.Running) {
			return nil, "", false
		}
		for _, a := range may {
			if !take(a) {
				return nil, "", false
			}
		}
		return victims, whys[victims[0].JobID], true
	}
	free := h.FreeGPUs
	for _, a := range may {
		if free >= j.GPUCount {
			break
		}
		if take(a) {
			free += a.GPUs
		}
	}
	if free < j.GPUCount || len(victims) == 0 {
		return nil, "", false
	}
	return victims, whys[victims[0].JobID], true
}
