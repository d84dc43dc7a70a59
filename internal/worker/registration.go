package worker

import (
	"context"
	"errors"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
)

func (w *Worker) onRegistered(ctx context.Context, s *session, resp protocol.RegisterResponse, sent time.Time) {
	interval := w.link.register(resp, sent)
	s.fence.Reset(fenceTick(w.link.setFenceLimit(seconds(resp.HeartbeatTimeoutSeconds), interval)))
	w.reconcile(resp)
	select { // self-fenced reports may go now
	case s.kick <- struct{}{}:
	default:
	}
	w.wg.Add(1)
	go w.stream(ctx, s.gen, resp.WorkerID)
}

// errFencedMeanwhile is why a registration that listed an attempt self-fenced
// after it was composed is made again.
var errFencedMeanwhile = errors.New("a job was self-fenced while the registration was on its way; registering again without it")

// reconcile applies the registration's verdict on each attempt this worker
// runs. An abandoned attempt is stopped without a report: the orchestrator
// already ended it, and a report could only be refused (409) or, worse, be
// mistaken for news.
func (w *Worker) reconcile(resp protocol.RegisterResponse) {
	for _, a := range w.slots.running() {
		if a.stop == stopFence {
			continue // left out of the registration: it is being stopped
		}
		switch abandon, resume := a.verdict(resp); {
		case abandon:
			w.stopJob(a, stopAbandon, "the orchestrator abandoned this attempt", a.grace)
		case resume:
			a.log.Info("the orchestrator resumed the running attempt")
		default:
			a.log.Warn("the orchestrator neither resumed nor abandoned the running attempt; keeping it")
		}
	}
}

// verdict is what a registration's answer says of r: abandoned (stop it
// without a report) or resumed; neither keeps it.
func (r *runner) verdict(resp protocol.RegisterResponse) (abandon, resume bool) {
	for _, x := range resp.Abandon {
		abandon = abandon || r.matches(x.JobID, x.Attempt)
	}
	for _, x := range resp.Resume {
		resume = resume || r.matches(x.JobID, x.Attempt)
	}
	if resp.AbandonJob != nil && *resp.AbandonJob == r.jobID && len(resp.Resume) == 0 {
		abandon = true
	}
	if resp.ResumeJob != nil && resp.ResumeJob.JobID == r.jobID {
		resume = true
	}
	return abandon, resume
}

func seconds(f float64) time.Duration { return time.Duration(f * float64(time.Second)) }
