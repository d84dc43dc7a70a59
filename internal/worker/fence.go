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

// setFenceLimit applies the orchestrator's timers from a registration and
// logs the effective limit when it changes; it returns the limit.
func (w *Worker) setFenceLimit(timeout, interval time.Duration) time.Duration {
	limit := fenceLimit(w.opt.SelfFenceAfter, timeout, interval)
	w.mu.Lock()
	changed := limit != w.fenceAfter
	w.fenceAfter = limit
	w.mu.Unlock()
	switch {
	case !changed:
	case w.opt.SelfFenceAfter > 0 && limit < w.opt.SelfFenceAfter:
		w.log.Warn("self_fence_after is not safely below the orchestrator's heartbeat timeout; using a shorter limit",
			"self_fence_after", w.opt.SelfFenceAfter.String(), "heartbeat_timeout", timeout.String(), "effective", limit.String())
	default:
		w.log.Info("self-fence limit", "effective", limit.String(), "heartbeat_timeout", timeout.String())
	}
	return limit
}

// ackedLocked records that the orchestrator answered a request sent at
// sent. It heard from this worker no earlier than that, and the self-fence
// limit counts from there: counting from the answer would let a slow answer
// eat the margin between the limit and the orchestrator's timeout.
func (w *Worker) ackedLocked(sent time.Time) {
	if sent.After(w.lastAck) {
		w.lastAck = sent
	}
}

// checkFence stops every running job when heartbeats have not been acknowledged
// for the fence limit: the orchestrator is about to declare this worker lost
// and run the job elsewhere.
func (w *Worker) checkFence() {
	w.mu.Lock()
	running, last, limit := w.slots.running(), w.lastAck, w.fenceAfter
	w.mu.Unlock()
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
