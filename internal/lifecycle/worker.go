package lifecycle

import "github.com/simpletuner/simpletuner-orchestration/internal/protocol"

// A worker's status says whether it can take work:
//
//	connecting  created by an admin, never connected yet
//	idle        connected, running nothing
//	busy        connected, every slot running an attempt
//	draining    an admin asked it to take no new job; it finishes what it runs
//	offline     its stream closed and its heartbeats stopped
//
// A worker has one slot per job it may run at once.

// Settle recomputes the status of a worker whose attempts changed (one was
// claimed for it, or one ended): idle and busy follow the attempts it runs;
// draining, offline and connecting are kept.
func Settle(cur protocol.WorkerStatus, running, slots int) protocol.WorkerStatus {
	if cur != protocol.WorkerIdle && cur != protocol.WorkerBusy {
		return cur
	}
	return online(running, slots)
}

// Alive is the status of a worker that just showed a sign of life (it
// registered, opened its stream or sent a heartbeat): an offline or
// connecting worker is back, idle or busy by what it runs; draining stays.
func Alive(cur protocol.WorkerStatus, running, slots int) protocol.WorkerStatus {
	if cur == protocol.WorkerDraining {
		return cur
	}
	return online(running, slots)
}

// Resumed is the status of a draining worker an admin resumed.
func Resumed(running, slots int) protocol.WorkerStatus { return online(running, slots) }

func online(running, slots int) protocol.WorkerStatus {
	if running > 0 && running >= max(slots, 1) {
		return protocol.WorkerBusy
	}
	return protocol.WorkerIdle
}

// CanClaim reports whether the scheduler may hand a worker in status cur,
// running that many attempts, another one: it must be connected, not
// draining, and have a free slot (busy means it has none).
func CanClaim(cur protocol.WorkerStatus, running, slots int) bool {
	return cur == protocol.WorkerIdle && running < max(slots, 1)
}
