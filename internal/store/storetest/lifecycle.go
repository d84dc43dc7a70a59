package storetest

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/lifecycle"
	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
	"github.com/simpletuner/simpletuner-orchestration/internal/store"
)

var lifecycleTests = []test{
	{"TransitionEveryPairOfStates", testEveryPairOfStates},
}

// inState makes a job (on a fresh worker) and takes it to st by legal moves.
func inState(t *testing.T, s store.Store, st protocol.JobStatus) (store.Worker, store.Job) {
	t.Helper()
	w := newWorker(t, s)
	if st == protocol.JobPendingApproval || st == protocol.JobWaiting {
		return w, newJob(t, s, func(j *store.Job) { j.Status = st })
	}
	j := newJob(t, s)
	if st == protocol.JobQueued {
		return w, j
	}
	j, _, err := s.ClaimJob(t.Context(), store.ClaimRequest{WorkerID: w.ID, JobID: j.ID, UploadTokenHash: "up",
		AckDeadline: at(time.Minute), Now: at(time.Second)})
	noErr(t, err, "claim")
	switch st {
	case protocol.JobDispatched:
	case protocol.JobRunning:
		j = transition(t, s, j, store.JobTransition{Step: lifecycle.Step{To: st, By: lifecycle.Report, Ack: true}})
	case protocol.JobCanceling:
		j = transition(t, s, j, store.JobTransition{Step: lifecycle.Step{To: st, By: lifecycle.Cancel}})
	default:
		j = finish(t, s, j, st)
	}
	return getWorker(t, s, w.ID), j
}

// Every pair of states under every cause: the moves of the lifecycle table
// succeed with their effects, every other one is refused with an error that
// says why, and a refused one changes nothing (job, attempts, worker, audit).
func testEveryPairOfStates(t *testing.T, s store.Store) {
	for _, from := range lifecycle.States {
		for _, to := range lifecycle.States {
			for _, by := range lifecycle.Causes {
				name := fmt.Sprintf("%s → %s by %s", from, to, by)
				w, j := inState(t, s, from)
				m := lifecycle.Find(from, to, by)
				step := lifecycle.Step{To: to, By: by, Error: ptr("moved")}
				if m != nil {
					step.EndAttempt, step.Ack, step.SpendRetry = m.Ends, m.Ack, m.MaySpendRetry
				}
				before, audits := attempts(t, s, j.ID), len(chain(t, s))
				nj, err := s.TransitionJob(t.Context(), store.JobTransition{JobID: j.ID, ExpectAttempt: j.Attempt,
					From: from, Step: step, Now: at(time.Hour), Audit: rec("job.transition")})
				switch {
				case m != nil && by == lifecycle.Claim:
					// A claim opens an attempt, which only ClaimJob does.
					wantErr(t, err, store.ErrIllegalMove, name+" through TransitionJob")
				case m != nil:
					noErr(t, err, name)
					if nj.Status != to {
						t.Fatalf("%s: job is %s", name, nj.Status)
					}
					equal(t, nj, getJob(t, s, j.ID), name+": the job TransitionJob returned is the stored one")
					after := attempts(t, s, j.ID)
					if m.Ends != "" && (len(after) == 0 || after[len(after)-1].Outcome != m.Ends) {
						t.Fatalf("%s: attempts %+v, want the last one ended %s", name, after, m.Ends)
					}
					if m.Ends != "" {
						if gw := getWorker(t, s, w.ID); gw.CurrentJobID != "" || gw.Status != protocol.WorkerIdle {
							t.Fatalf("%s: worker not freed: %+v", name, gw)
						}
					}
					if len(chain(t, s)) != audits+1 {
						t.Fatalf("%s: no audit record", name)
					}
					continue
				default:
					if !errors.Is(err, store.ErrIllegalMove) && !errors.Is(err, store.ErrConflict) {
						t.Fatalf("%s: got %v, want a refusal", name, err)
					}
					if from.Terminal() != errors.Is(err, store.ErrConflict) {
						t.Fatalf("%s: got %v; a terminal job is a conflict, any other illegal move an illegal move", name, err)
					}
					var ill *lifecycle.ErrIllegal
					if !from.Terminal() && !errors.As(err, &ill) {
						t.Fatalf("%s: %v does not name the move", name, err)
					}
				}
				equal(t, getJob(t, s, j.ID), j, name+": job after a refused move")
				equal(t, attempts(t, s, j.ID), before, name+": attempts after a refused move")
				equal(t, getWorker(t, s, w.ID), w, name+": worker after a refused move")
				equal(t, len(chain(t, s)), audits, name+": audit records after a refused move")
			}
		}
	}
}
