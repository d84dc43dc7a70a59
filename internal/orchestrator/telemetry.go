package orchestrator

import (
	"sync"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/api"
	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
)

// maxTelemetryGPUs bounds what one heartbeat can make the orchestrator keep.
const maxTelemetryGPUs = 64

// The workers' latest live GPU numbers, as their protocol-2 heartbeats
// reported them, are kept in memory only: they change every heartbeat, are
// worthless after a restart, and writing them would cost the store a write
// per heartbeat. With several replicas, each knows the numbers of the
// workers that heartbeat to it.

type telemetryMap struct {
	mu sync.RWMutex
	m  map[string]api.GPUTelemetry
}

func newTelemetryMap() *telemetryMap { return &telemetryMap{m: map[string]api.GPUTelemetry{}} }

func (t *telemetryMap) set(workerID string, gpus []protocol.GPUTelemetry, at time.Time) {
	if len(gpus) == 0 {
		return
	}
	gpus = append([]protocol.GPUTelemetry(nil), gpus[:min(len(gpus), maxTelemetryGPUs)]...)
	t.mu.Lock()
	t.m[workerID] = api.GPUTelemetry{At: protocol.Time(at), GPUs: gpus}
	t.mu.Unlock()
}

func (t *telemetryMap) get(workerID string) *api.GPUTelemetry {
	t.mu.RLock()
	defer t.mu.RUnlock()
	v, ok := t.m[workerID]
	if !ok {
		return nil
	}
	return &v
}

func (t *telemetryMap) forget(workerID string) {
	t.mu.Lock()
	delete(t.m, workerID)
	t.mu.Unlock()
}
