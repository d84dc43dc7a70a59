package worker

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
)

// heartbeatReply carries what a heartbeat answer asks of the loop, with the
// attempts that heartbeat listed as running, by job.
type heartbeatReply struct {
	resp   protocol.HeartbeatResponse
	listed map[string]int
}

// authRejected tells the loop the orchestrator answered 401.
type authRejected struct{ err error }

// heartbeater sends the heartbeats. It reads what they say from the
// session's link, the ledger and the GPU watcher, and hands what an answer
// asks to the loop.
type heartbeater struct {
	opt      *Options
	log      *slog.Logger
	c        *client
	link     *link
	books    *ledger
	gpus     *gpuWatch
	draining func() bool // the worker was asked to drain (Drain)
	post     func(any)   // to the session loop
	// now asks for a heartbeat now (a drain began, a GPU changed).
	now chan struct{}
	// clockOffset shifts the wall clock workerd reports (a fault-suite hook).
	clockOffset time.Duration
}

// soon asks for a heartbeat now, so the orchestrator learns of a change
// (a drain, a GPU's health) without waiting for the next beat.
func (h *heartbeater) soon() {
	select {
	case h.now <- struct{}{}:
	default:
	}
}

// run beats on its own goroutine from the first registration on, whatever
// the stream does: a broken stream must not also make the worker look dead.
// It ends with ctx, or at stop once no beat is in flight.
func (h *heartbeater) run(ctx context.Context, stop <-chan struct{}) {
	select {
	case <-ctx.Done():
		return
	case <-stop:
		return
	case <-h.link.registered:
	}
	t := time.NewTimer(0)
	defer t.Stop()
	failing := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-stop:
			return
		case <-t.C:
		case <-h.now:
			t.Stop()
		}
		select {
		case <-stop: // it may have come with the timer: stop wins
			return
		default:
		}
		err := h.beat(ctx)
		switch {
		case err == nil:
			if failing {
				h.log.Info("heartbeats acknowledged again")
				failing = false
			}
		case isAuthError(err):
			// Nothing sent with a refused token can succeed: wait for the
			// loop to install a new one (or to end the worker).
			h.post(authRejected{err: err})
			if !h.c.Token().WaitUntilUsable(ctx, stop) {
				return
			}
		case ctx.Err() != nil:
			return
		default:
			if !failing {
				h.log.Warn("heartbeat failed", "err", err)
				failing = true
			} else {
				h.log.Debug("heartbeat failed", "err", err)
			}
		}
		t.Reset(h.link.heartbeatInterval(h.opt.Timers.HeartbeatInterval))
	}
}

func (h *heartbeater) beat(ctx context.Context) error {
	req := protocol.HeartbeatRequest{WorkerID: h.link.id(), Status: string(protocol.WorkerIdle)}
	// One snapshot of the ledger: an attempt moves from running to finishing
	// (and finishing ends only after its report was acknowledged) under its
	// lock, so no heartbeat can miss an attempt whose outcome is on the way.
	running, current, _ := h.books.snapshot()
	req.Running = running
	if current != "" {
		req.Status = string(protocol.WorkerBusy)
		req.CurrentJobID = &current
	}
	if h.draining() {
		// The orchestrator then stops dispatching here at once, instead of
		// handing the worker jobs it would only ignore until it leaves.
		req.Status = string(protocol.WorkerDraining)
	}
	req.SentAt = h.wallClock().UTC().Format(time.RFC3339Nano)
	if tel, err := h.opt.GPU.Telemetry(); err == nil {
		for i := range tel {
			tel[i].Health = h.gpus.health(tel[i].Index)
		}
		req.GPUs = tel
	}
	req.GPUConditions = h.gpus.conditions()
	var resp protocol.HeartbeatResponse
	sent := time.Now()
	if err := h.c.DoJSON(ctx, h.opt.Timers.RequestTimeout, "heartbeat", http.MethodPost, "/api/workers/heartbeat", req, &resp); err != nil {
		return err
	}
	h.link.acked(sent)
	if len(resp.Cancel) > 0 || resp.Drain || len(resp.ClearGPUs) > 0 {
		listed := map[string]int{}
		for _, r := range req.Running {
			if !r.Finishing() {
				listed[r.JobID] = r.Attempt
			}
		}
		h.post(heartbeatReply{resp: resp, listed: listed})
	}
	return nil
}

// wallClock is the time workerd reports as its own (heartbeats' sent_at).
func (h *heartbeater) wallClock() time.Time { return time.Now().Add(h.clockOffset) }
