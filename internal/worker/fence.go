package worker

import (
	"fmt"
	"time"
)

// Self-fencing: a worker that cannot get its heartbeats acknowledged stops its
// job before the orchestrator declares the worker lost and runs the job
// elsewhere, so two attempts of a job never train at once. That holds only
// while the worker's limit stays below the orchestrator's heartbeat timeout,
// so the limit is derived from the timeout the orchestrator announces at
// registration rather than trusted to two configuration files agreeing.

// fenceLimit is the effective self-fence limit: the configured one, kept below
// the orchestrator's heartbeat timeout by a margin of one heartbeat interval
// or a quarter of the timeout, whichever is larger (120 s and 30 s give 90 s).
// A timeout of 0 (an orchestrator that does not say) leaves the configured
// limit; a configured 0 means "derive it from the orchestrator".
func fenceLimit(configured, timeout, interval time.Duration) time.Duration {
	if timeout <= 0 {
		return configured
	}
	derived := timeout - max(interval, timeout/4)
	if derived <= 0 {
		derived = timeout / 2
	}
	if configured <= 0 || configured > derived {
		return derived
	}
	return configured
}

// fenceTick is how often the loop checks the limit: a tenth of it, between
// 10 ms and 5 s (5 s while there is no limit yet).
func fenceTick(limit time.Duration) time.Duration {
	if limit <= 0 {
		return 5 * time.Second
	}
	return min(max(limit/10, 10*time.Millisecond), 5*time.Second)
}

// checkFence stops every running job when heartbeats have not been acknowledged
// for the fence limit: the orchestrator is about to declare this worker lost
// and run the job elsewhere.
func (w *Worker) checkFence() {
	running, last, limit := w.slots.running(), w.link.lastAcked(), w.link.fenceLimit()
	if last.IsZero() || limit <= 0 {
		return
	}
	since := time.Since(last)
	if since <= limit {
		return
	}
	for _, a := range running {
		if a.stop != notStopped {
			continue
		}
		detail := fmt.Sprintf("self-fenced: no heartbeat acknowledged for %s", since.Round(time.Second))
		a.log.Error("stopping the job: the orchestrator has not acknowledged a heartbeat in time and will give it to another worker",
			"self_fence_after", limit.String())
		w.stopJob(a, stopFence, detail, a.grace)
	}
}
