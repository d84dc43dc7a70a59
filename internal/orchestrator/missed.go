package orchestrator

import (
	"sync"

	"github.com/simpletuner/simpletuner-orchestration/internal/store"
)

// missedAttempts remembers, per worker, the running attempts its latest
// heartbeat left out. An attempt counts as lost only when the next heartbeat
// leaves it out again. It lives in memory: after a restart (or on another
// replica) the first miss is merely noted again, which only delays a verdict
// by one heartbeat.
type missedAttempts struct {
	mu sync.Mutex
	m  map[string]map[string]int // worker → job → attempt
}

// note records the attempts the worker's heartbeat left out and returns those
// that its previous heartbeat had left out too.
func (m *missedAttempts) note(workerID string, absent []store.Job) (lost []store.Job) {
	m.mu.Lock()
	defer m.mu.Unlock()
	prev := m.m[workerID]
	if len(absent) == 0 {
		delete(m.m, workerID)
		return nil
	}
	now := make(map[string]int, len(absent))
	for _, j := range absent {
		if a, ok := prev[j.ID]; ok && a == j.Attempt {
			lost = append(lost, j)
			continue
		}
		now[j.ID] = j.Attempt
	}
	if m.m == nil {
		m.m = map[string]map[string]int{}
	}
	m.m[workerID] = now
	return lost
}

// forget drops what is known of a worker (offline, deleted).
func (m *missedAttempts) forget(workerID string) {
	m.mu.Lock()
	delete(m.m, workerID)
	m.mu.Unlock()
}
