package liveness

import (
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/lifecycle"
	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
	"github.com/simpletuner/simpletuner-orchestration/internal/store"
)

// Rules are the timeouts that give a worker's silence its meaning.
type Rules struct {
	HeartbeatTimeout      time.Duration
	EphemeralCleanupAfter time.Duration
	// InStartupGrace is true right after the orchestrator started: every
	// worker looks silent then until it has reconnected, so none is judged.
	InStartupGrace bool
}

// Verdict is what a worker's silence means.
type Verdict int

const (
	// Alive: nothing to do.
	Alive Verdict = iota
	// Silent: a connected or draining worker whose last heartbeat is older
	// than the heartbeat timeout. It is to be marked offline, and the
	// attempts it held are lost.
	Silent
	// Expired: an ephemeral worker, offline and idle for longer than the
	// cleanup delay. It is to be deleted.
	Expired
)

// Judge tells what w's silence at now means. w.LastHeartbeat must be the
// worker's latest heartbeat, one that could not be stored included.
func Judge(w store.Worker, now time.Time, r Rules) Verdict {
	if w.LastHeartbeat == nil {
		return Alive
	}
	silence := now.Sub(*w.LastHeartbeat)
	switch {
	case lifecycle.Working(w.Status) || w.Status == protocol.WorkerDraining:
		// A draining worker that vanished must not keep its job forever.
		if !r.InStartupGrace && silence > r.HeartbeatTimeout {
			return Silent
		}
	case w.Status == protocol.WorkerOffline:
		if w.Type == protocol.Ephemeral && w.CurrentJobID == "" && silence > r.EphemeralCleanupAfter {
			return Expired
		}
	}
	return Alive
}
