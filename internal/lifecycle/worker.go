package lifecycle

import "github.com/simpletuner/simpletuner-orchestration/internal/protocol"

// A worker's status says whether it can take work:
//
//	connecting  created by an admin, never connected yet
//	idle        connected, running nothing
//	partial     connected, running attempts, with room for more
//	busy        connected, with no room for another attempt
//	draining    an admin asked it to take no new job; it finishes what it runs
//	offline     its stream closed and its heartbeats stopped
//
// Room is a free job slot and, on a worker with GPUs, a free GPU.

// Load is what a worker runs against what it can run.
type Load struct {
	Running  int // attempts out on it
	Slots    int // how many it may run at once; 1 for a worker that gives a job all its GPUs
	GPUs     int // its GPUs
	GPUsUsed int // its GPUs held by attempts
	// WholeWorker: an attempt that took the whole worker runs there, alone.
	WholeWorker bool
}

// Full reports whether the worker has no room for another attempt.
func (l Load) Full() bool {
	return l.WholeWorker || l.Running >= max(l.Slots, 1) || (l.GPUs > 0 && l.GPUsUsed >= l.GPUs)
}

// FreeGPUs is how many of its GPUs no attempt holds.
func (l Load) FreeGPUs() int { return max(l.GPUs-l.GPUsUsed, 0) }

// Settle recomputes the status of a worker whose attempts changed (one was
// claimed for it, or one ended): idle, partial and busy follow its load;
// draining, offline and connecting are kept.
func Settle(cur protocol.WorkerStatus, l Load) protocol.WorkerStatus {
	if Working(cur) {
		return online(l)
	}
	return cur
}

// Working reports whether a worker in status cur is online and taking work
// as its load allows: idle, partial or busy (not draining, connecting or
// offline).
func Working(cur protocol.WorkerStatus) bool {
	return cur == protocol.WorkerIdle || cur == protocol.WorkerPartial || cur == protocol.WorkerBusy
}

// Alive is the status of a worker that just showed a sign of life (it
// registered, opened its stream or sent a heartbeat): an offline or
// connecting worker is back, by its load; draining stays.
func Alive(cur protocol.WorkerStatus, l Load) protocol.WorkerStatus {
	if cur == protocol.WorkerDraining {
		return cur
	}
	return online(l)
}

// Resumed is the status of a draining worker an admin resumed: by its load,
// or connecting again when it never connected (drained while still new).
func Resumed(l Load, everConnected bool) protocol.WorkerStatus {
	if !everConnected {
		return protocol.WorkerConnecting
	}
	return online(l)
}

func online(l Load) protocol.WorkerStatus {
	switch {
	case l.Running == 0:
		return protocol.WorkerIdle
	case l.Full():
		return protocol.WorkerBusy
	}
	return protocol.WorkerPartial
}

// CanClaim reports whether the scheduler may hand a worker in status cur,
// with load l, another attempt: it must be connected, not draining, and have
// room.
func CanClaim(cur protocol.WorkerStatus, l Load) bool {
	return (cur == protocol.WorkerIdle || cur == protocol.WorkerPartial) && !l.Full()
}
