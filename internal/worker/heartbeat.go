package worker

import (
	"context"
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

// heartbeatLoop beats on its own goroutine from the first registration on, whatever
// the stream does: a broken stream must not also make the worker look dead.
// It ends with ctx, or at stop once no beat is in flight.
func (w *Worker) heartbeatLoop(ctx context.Context, stop <-chan struct{}) {
	defer w.wg.Done()
	select {
	case <-ctx.Done():
		return
	case <-stop:
		return
	case <-w.link.registered:
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
		case <-w.hbNow:
			t.Stop()
		}
		select {
		case <-stop: // it may have come with the timer: stop wins
			return
		default:
		}
		err := w.heartbeat(ctx)
		switch {
		case err == nil:
			if failing {
				w.log.Info("heartbeats acknowledged again")
				failing = false
			}
		case isAuthError(err):
			// Nothing sent with a refused token can succeed: wait for the
			// loop to install a new one (or to end the worker).
			w.post(authRejected{err: err})
			if !w.c.Token().WaitUntilUsable(ctx, stop) {
				return
			}
		case ctx.Err() != nil:
			return
		default:
			if !failing {
				w.log.Warn("heartbeat failed", "err", err)
				failing = true
			} else {
				w.log.Debug("heartbeat failed", "err", err)
			}
		}
		t.Reset(w.link.heartbeatInterval(w.opt.Timers.HeartbeatInterval))
	}
}

func (w *Worker) heartbeat(ctx context.Context) error {
	req := protocol.HeartbeatRequest{WorkerID: w.link.id(), Status: string(protocol.WorkerIdle)}
	// One snapshot of the ledger: an attempt moves from running to finishing
	// (and finishing ends only after its report was acknowledged) under its
	// lock, so no heartbeat can miss an attempt whose outcome is on the way.
	running, current, _ := w.books.snapshot()
	req.Running = running
	if current != "" {
		req.Status = string(protocol.WorkerBusy)
		req.CurrentJobID = &current
	}
	w.mu.Lock()
	if w.localDrain {
		// The orchestrator then stops dispatching here at once, instead of
		// handing the worker jobs it would only ignore until it leaves.
		req.Status = string(protocol.WorkerDraining)
	}
	w.mu.Unlock()
	req.SentAt = w.wallClock().UTC().Format(time.RFC3339Nano)
	if tel, err := w.opt.GPU.Telemetry(); err == nil {
		for i := range tel {
			tel[i].Health = w.gpus.health(tel[i].Index)
		}
		req.GPUs = tel
	}
	req.GPUConditions = w.gpus.conditions()
	var resp protocol.HeartbeatResponse
	sent := time.Now()
	if err := w.c.DoJSON(ctx, w.opt.Timers.RequestTimeout, "heartbeat", http.MethodPost, "/api/workers/heartbeat", req, &resp); err != nil {
		return err
	}
	w.link.acked(sent)
	if len(resp.Cancel) > 0 || resp.Drain || len(resp.ClearGPUs) > 0 {
		listed := map[string]int{}
		for _, r := range req.Running {
			if !r.Finishing() {
				listed[r.JobID] = r.Attempt
			}
		}
		w.post(heartbeatReply{resp: resp, listed: listed})
	}
	return nil
}

// wallClock is the time workerd reports as its own (heartbeats' sent_at).
func (w *Worker) wallClock() time.Time { return time.Now().Add(w.clockOffset) }
