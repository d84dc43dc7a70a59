package liveness

import (
	"math"
	"time"
)

// Worker clocks are only reported, never trusted: the orchestrator decides
// every deadline, expiry and offline verdict on its own clock, so a worker
// whose clock is minutes off keeps working. Heartbeats carry the worker's
// wall clock (sent_at); the difference to ours is shown in the worker list,
// because logs and timestamps from such a machine will not line up with
// everyone else's.

// clockSkewWarnAbove is the skew past which a warning is logged (once per
// worker, until it is back under).
const clockSkewWarnAbove = time.Minute

// NoteClock records the skew of a worker's clock (sent minus received:
// positive when the worker is ahead; the request's transit time makes it look
// up to that much behind) and warns when it grows large.
func (m *Memory) NoteClock(workerID string, sent, received time.Time) {
	skew := sent.Sub(received)
	m.mu.Lock()
	m.skew[workerID] = skew
	large := skew > clockSkewWarnAbove || -skew > clockSkewWarnAbove
	warn := large && !m.warned[workerID]
	m.warned[workerID] = large
	m.mu.Unlock()
	if warn {
		m.log.Warn("a worker's clock is far off; it keeps working (the orchestrator's clock decides), but its logs and timestamps will not line up",
			"worker_id", workerID, "clock_skew", skew.Round(time.Second).String())
	}
}

// ClockSkewSeconds is the worker's last known skew, rounded to 0.1 s; nil
// when unknown.
func (m *Memory) ClockSkewSeconds(workerID string) *float64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	d, ok := m.skew[workerID]
	if !ok {
		return nil
	}
	s := math.Round(d.Seconds()*10)/10 + 0 // + 0: never -0
	return &s
}
