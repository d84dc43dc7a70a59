package adminapi

import (
	"fmt"
	"testing"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/lifecycle"
	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
	"github.com/simpletuner/simpletuner-orchestration/internal/store"
)

// The last-24-hours counts from an older full count plus the two short
// ranges equal a full count of the window now: jobs that slid out of the
// window since are taken off, jobs that ended since are added.
func TestRecentEndCountsSlideExactly(t *testing.T) {
	t.Parallel()
	a, st := newTestAPI(t)
	ctx := t.Context()
	w := store.Worker{ID: protocol.NewWorkerID(), Name: "w", Status: protocol.WorkerIdle, GPUInfo: store.ReadGPUInfo([]byte(`{}`))}
	if err := st.CreateWorker(ctx, w, "h", nil); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	end := func(ago time.Duration, to protocol.JobStatus, outcome protocol.AttemptOutcome) {
		t.Helper()
		j, err := st.InsertJob(ctx, store.Job{ConfigName: fmt.Sprint(ago)}, nil)
		if err != nil {
			t.Fatal(err)
		}
		j, _, err = st.ClaimJob(ctx, store.ClaimRequest{WorkerID: w.ID, JobID: j.ID, AckDeadline: now.Add(time.Hour)})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := st.TransitionJob(ctx, store.JobTransition{JobID: j.ID, ExpectAttempt: 1, From: protocol.JobDispatched,
			Now: now.Add(-ago), Step: lifecycle.Step{To: to, By: lifecycle.Report, EndAttempt: outcome}}); err != nil {
			t.Fatal(err)
		}
	}
	end(recentWindow+90*time.Second, protocol.JobCompleted, protocol.OutcomeCompleted) // in the old count, out now
	end(recentWindow+time.Hour, protocol.JobFailed, protocol.OutcomeFailed)            // out of both
	end(time.Hour, protocol.JobCompleted, protocol.OutcomeCompleted)                   // in both
	end(2*time.Minute, protocol.JobFailed, protocol.OutcomeFailed)                     // in both

	// A full count taken 50 s ago (still fresh enough to be used), before
	// the last two jobs below ended.
	then := now.Add(-50 * time.Second)
	r := &a.recent
	r.since, r.until, r.at = then.Add(-recentWindow), then.Add(-recentLag), now
	counts, err := st.CountJobsEndedBetween(ctx, r.since, r.until)
	if err != nil {
		t.Fatal(err)
	}
	r.counts = counts
	end(70*time.Second, protocol.JobCompleted, protocol.OutcomeCompleted) // after the old count's upper end
	end(time.Second, protocol.JobFailed, protocol.OutcomeFailed)

	got, err := a.recentEndCounts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want, err := st.CountJobsEndedSince(ctx, time.Now().Add(-recentWindow))
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range []protocol.JobStatus{protocol.JobCompleted, protocol.JobFailed} {
		if got[st] != want[st] {
			t.Errorf("%s: %d from the older count and the ranges, %d counted outright", st, got[st], want[st])
		}
	}
	if want[protocol.JobCompleted] != 2 || want[protocol.JobFailed] != 2 {
		t.Errorf("the window holds %v", want)
	}
}
