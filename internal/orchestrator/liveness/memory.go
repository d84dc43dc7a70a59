// Package liveness is what the orchestrator knows of each worker between two
// heartbeats, and what a worker's silence means. It keeps, in memory only,
// the running attempts a heartbeat left out, each worker's clock skew, its
// latest GPU numbers and a heartbeat the full database could not store; and
// it tells, from a worker's last heartbeat, whether
// it is to be marked offline or, for an ephemeral worker long offline,
// deleted. The orchestrator carries the verdicts out; nothing here writes.
//
// Memory lives in one process: after a restart, or on another replica, it
// starts empty, which only delays a verdict about a left-out attempt by one
// heartbeat and leaves the live GPU numbers blank until the next one.
package liveness

import (
	"log/slog"
	"sync"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/api"
	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
	"github.com/simpletuner/simpletuner-orchestration/internal/store"
)

// MaxTelemetryGPUs bounds the GPUs of one heartbeat the orchestrator keeps
// numbers of.
const MaxTelemetryGPUs = 64

// Memory is the per-worker knowledge heartbeats bring. Safe for concurrent use.
type Memory struct {
	log *slog.Logger

	mu sync.Mutex
	// missed: worker → job → attempt, the running attempts the latest
	// heartbeat left out.
	missed map[string]map[string]int
	// skew: sent minus received of the latest heartbeat; warned: the skew
	// was past clockSkewWarnAbove when last noted (warn once per excursion).
	skew   map[string]time.Duration
	warned map[string]bool
	// telemetry: the GPU numbers of the latest protocol-2 heartbeat. They
	// change every heartbeat; writing them would cost a store write each.
	telemetry map[string]api.GPUTelemetry
	// beats: heartbeats that could not be written (the database's disk was
	// full). The worker is alive all the same.
	beats map[string]time.Time
}

// NewMemory returns an empty memory that logs its warnings to log.
func NewMemory(log *slog.Logger) *Memory {
	return &Memory{
		log:       log,
		missed:    map[string]map[string]int{},
		skew:      map[string]time.Duration{},
		warned:    map[string]bool{},
		telemetry: map[string]api.GPUTelemetry{},
		beats:     map[string]time.Time{},
	}
}

// KeepBeat keeps a heartbeat that could not be written.
func (m *Memory) KeepBeat(workerID string, at time.Time) {
	m.mu.Lock()
	m.beats[workerID] = at
	m.mu.Unlock()
}

// BeatStored forgets the kept heartbeat once one was written.
func (m *Memory) BeatStored(workerID string) {
	m.mu.Lock()
	if len(m.beats) > 0 {
		delete(m.beats, workerID)
	}
	m.mu.Unlock()
}

// LastBeat is the later of the stored heartbeat and one kept in memory.
func (m *Memory) LastBeat(workerID string, stored *time.Time) *time.Time {
	m.mu.Lock()
	defer m.mu.Unlock()
	if t, ok := m.beats[workerID]; ok && (stored == nil || t.After(*stored)) {
		return &t
	}
	return stored
}

// LostAttempts records the running attempts a worker's heartbeat left out
// and returns those its previous heartbeat had left out too: an attempt
// counts as lost only when two heartbeats in a row do not list it, for a
// heartbeat composed just before the job started may not know it yet.
func (m *Memory) LostAttempts(workerID string, absent []store.Job) (lost []store.Job) {
	m.mu.Lock()
	defer m.mu.Unlock()
	prev := m.missed[workerID]
	if len(absent) == 0 {
		delete(m.missed, workerID)
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
	m.missed[workerID] = now
	return lost
}

// SetTelemetry keeps the GPU numbers of a worker's heartbeat (at most
// MaxTelemetryGPUs of them); an empty list keeps the previous ones.
func (m *Memory) SetTelemetry(workerID string, gpus []protocol.GPUTelemetry, at time.Time) {
	if len(gpus) == 0 {
		return
	}
	gpus = append([]protocol.GPUTelemetry(nil), gpus[:min(len(gpus), MaxTelemetryGPUs)]...)
	m.mu.Lock()
	m.telemetry[workerID] = api.GPUTelemetry{At: protocol.Time(at), GPUs: gpus}
	m.mu.Unlock()
}

// Telemetry is the worker's latest GPU numbers; nil when none arrived here.
func (m *Memory) Telemetry(workerID string) *api.GPUTelemetry {
	m.mu.Lock()
	defer m.mu.Unlock()
	v, ok := m.telemetry[workerID]
	if !ok {
		return nil
	}
	return &v
}

// Offline forgets what only a live worker has: its left-out attempts (they
// ended with it) and its GPU numbers. Its clock skew stays on show.
func (m *Memory) Offline(workerID string) {
	m.mu.Lock()
	delete(m.missed, workerID)
	delete(m.telemetry, workerID)
	m.mu.Unlock()
}

// ForgetAttempts drops the worker's left-out attempts (its jobs were taken
// from it).
func (m *Memory) ForgetAttempts(workerID string) {
	m.mu.Lock()
	delete(m.missed, workerID)
	m.mu.Unlock()
}

// Forget drops everything known of a deleted worker.
func (m *Memory) Forget(workerID string) {
	m.mu.Lock()
	delete(m.missed, workerID)
	delete(m.telemetry, workerID)
	delete(m.skew, workerID)
	delete(m.warned, workerID)
	delete(m.beats, workerID)
	m.mu.Unlock()
}
