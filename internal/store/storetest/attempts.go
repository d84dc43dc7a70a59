package storetest

import (
	"testing"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/lifecycle"
	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
	"github.com/simpletuner/simpletuner-orchestration/internal/store"
)

var attemptTests = []test{
	{"AttemptByUploadToken", testAttemptByUploadToken},
	{"AttemptByUploadTokenUnknown", testAttemptByUploadTokenUnknown},
}

// Each attempt is found by its own upload token, and still found after it
// ended (whether it may upload then is the orchestrator's decision).
func testAttemptByUploadToken(t *testing.T, s store.Store) {
	w := newWorker(t, s)
	j := newJob(t, s)
	first, second := randHex(), randHex()
	j, a1, err := s.ClaimJob(t.Context(), store.ClaimRequest{WorkerID: w.ID, JobID: j.ID, UploadTokenHash: first,
		AckDeadline: at(time.Minute), Now: at(time.Second)})
	noErr(t, err, "claim 1")
	got, err := s.GetAttemptByUploadTokenHash(t.Context(), first)
	noErr(t, err, "lookup of the live attempt")
	equal(t, got, a1, "live attempt")

	j = transition(t, s, j, store.JobTransition{Step: lifecycle.Step{To: protocol.JobQueued, By: lifecycle.Loss,
		EndAttempt: protocol.OutcomeWithdrawn}, Now: at(2 * time.Second)})
	_, a2, err := s.ClaimJob(t.Context(), store.ClaimRequest{WorkerID: w.ID, JobID: j.ID, UploadTokenHash: second,
		AckDeadline: at(time.Minute), Now: at(3 * time.Second)})
	noErr(t, err, "claim 2")

	got, err = s.GetAttemptByUploadTokenHash(t.Context(), first)
	noErr(t, err, "lookup of the ended attempt")
	if got.Number != 1 || got.JobID != j.ID || got.EndedAt == nil || !got.EndedAt.Equal(at(2*time.Second)) ||
		got.Outcome != protocol.OutcomeWithdrawn {
		t.Fatalf("ended attempt: %+v", show(got))
	}
	got, err = s.GetAttemptByUploadTokenHash(t.Context(), second)
	noErr(t, err, "lookup of the new attempt")
	equal(t, got, a2, "new attempt")
}

func testAttemptByUploadTokenUnknown(t *testing.T, s store.Store) {
	w := newWorker(t, s)
	newJob(t, s)
	claim(t, s, w.ID)
	for _, h := range []string{"", randHex(), "UP"} {
		_, err := s.GetAttemptByUploadTokenHash(t.Context(), h)
		wantErr(t, err, store.ErrNotFound, "lookup of "+h)
	}
}
