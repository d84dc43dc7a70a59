package orchestrator

import (
	"log/slog"
	"math"
	"sync"
	"time"
)

// Worker clocks are only reported, never trusted: the orchestrator decides
// every deadline, expiry and offline verdict on its own clock, so a worker
// whose clock is minutes off keeps working. Heartbeats carry the worker's
// wall clock (sent_at); the difference to ours is shown in the worker list
// (clock_skew_seconds), because logs and timestamps from such a machine will
// not line up with everyone else's.

// clockSkewWarnAbove is the skew past which the orchestrator warns (once
// per worker, until it is back under).
const clockSkewWarnAbove = time.Minute

type clockSkews struct {
	mu     sync.Mutex
	m      map[string]time.Duration
	warned map[string]bool
}

func newClockSkews() *clockSkews {
	return &clockSkews{m: map[string]time.Duration{}, warned: map[string]bool{}}
}

// note records the skew of a worker's clock (sent minus received: positive
// when the worker is ahead; the request's transit time makes it look up to
// that much behind) and warns when it grows large.
func (c *clockSkews) note(log *slog.Logger, workerID string, sent, received time.Time) {
	skew := sent.Sub(received)
	c.mu.Lock()
	c.m[workerID] = skew
	large := skew > clockSkewWarnAbove || -skew > clockSkewWarnAbove
	warn := large && !c.warned[workerID]
	c.warned[workerID] = large
	c.mu.Unlock()
	if warn {
		log.Warn("a worker's clock is far off; it keeps working (the orchestrator's clock decides), but its logs and timestamps will not line up",
			"worker_id", workerID, "clock_skew", skew.Round(time.Second).String())
	}
}

// seconds is the worker's last known skew, rounded to 0.1 s; nil when unknown.
func (c *clockSkews) seconds(workerID string) *float64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	d, ok := c.m[workerID]
	if !ok {
		return nil
	}
	s := math.Round(d.Seconds()*10)/10 + 0 // + 0: never -0
	return &s
}

func (c *clockSkews) forget(workerID string) {
	c.mu.Lock()
	delete(c.m, workerID)
	delete(c.warned, workerID)
	c.mu.Unlock()
}
