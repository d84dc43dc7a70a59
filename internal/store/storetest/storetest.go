// Package storetest is the conformance suite every store backend must pass.
// Each test gets a fresh, empty store, so tests run in parallel.
package storetest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/audit"
	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
	"github.com/simpletuner/simpletuner-orchestration/internal/store"
)

type test struct {
	name string
	fn   func(t *testing.T, s store.Store)
}

// Run runs the suite; open returns a new, empty store (Run closes it).
func Run(t *testing.T, open func(t *testing.T) store.Store) {
	var all []test
	for _, group := range [][]test{workerTests, jobTests, claimTests, transitionTests, lifecycleTests, logTests, auditTests, tokenTests, notifyTests, attemptTests, dashboardTests, gpuTests, historyTests, checkpointTests, webhookTests, subscriptionTests, teamTests, authFlowTests, peopleTests, approvalTests, dependencyTests} {
		all = append(all, group...)
	}
	for _, tc := range all {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := open(t)
			t.Cleanup(func() {
				if err := s.Close(); err != nil {
					t.Errorf("close: %v", err)
				}
			})
			tc.fn(t, s)
		})
	}
}

// t0 is a fixed time at the precision stores keep (UTC microseconds).
var t0 = time.Date(2030, 1, 2, 3, 4, 5, 123456000, time.UTC)

func at(d time.Duration) time.Time { return t0.Add(d) }

func ptr[T any](v T) *T { return &v }

func randHex() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func rec(action string) *audit.Record {
	r := audit.New("system", "", action, "test", "", audit.Success, map[string]int{"n": 1})
	return &r
}

// newWorker creates an idle worker; mod may change it before insertion.
func newWorker(t *testing.T, s store.Store, mod ...func(*store.Worker)) store.Worker {
	t.Helper()
	w := store.Worker{ID: protocol.NewWorkerID(), Name: "gpu-box", Type: protocol.Persistent,
		Status: protocol.WorkerIdle, GPUInfo: store.ReadGPUInfo(json.RawMessage(`{"count":1}`)), CreatedAt: t0, CreatedBy: "admin:t"}
	for _, m := range mod {
		m(&w)
	}
	hash := randHex()
	if err := s.CreateWorker(t.Context(), w, hash, nil); err != nil {
		t.Fatalf("CreateWorker: %v", err)
	}
	got, err := s.GetWorker(t.Context(), w.ID)
	if err != nil {
		t.Fatalf("GetWorker: %v", err)
	}
	return got
}

// newJob inserts a queued job; mod may change it before insertion.
func newJob(t *testing.T, s store.Store, mod ...func(*store.Job)) store.Job {
	t.Helper()
	j := store.Job{ID: protocol.NewJobID(), ConfigName: "cfg", Config: json.RawMessage(`{"lr":1}`),
		Target: protocol.TargetAuto, GPUCount: 1, MaxRetries: 3, Status: protocol.JobQueued,
		SubmittedBy: "admin:t", CreatedAt: t0}
	for _, m := range mod {
		m(&j)
	}
	got, err := s.InsertJob(t.Context(), j, nil)
	if err != nil {
		t.Fatalf("InsertJob: %v", err)
	}
	equal(t, got, getJob(t, s, got.ID), "InsertJob returned the job")
	return got
}

// claim gives workerID the job at the head of the queue, as a scheduler pass
// with one idle worker would, and fails the test if there is none.
func claim(t *testing.T, s store.Store, workerID string) (store.Job, store.Attempt) {
	t.Helper()
	j, a, err := s.ClaimJob(t.Context(), store.ClaimRequest{WorkerID: workerID, JobID: headOfQueue(t, s), UploadTokenHash: "up",
		AckDeadline: at(time.Minute), Now: at(time.Second)})
	if err != nil {
		t.Fatalf("ClaimJob(%s): %v", workerID, err)
	}
	equal(t, j, getJob(t, s, j.ID), "ClaimJob returned the job")
	return j, a
}

// headOfQueue is the queued job a claim takes first: the highest priority,
// then the earliest submitted.
func headOfQueue(t *testing.T, s store.Store) string {
	t.Helper()
	head, err := s.ListQueued(t.Context(), nil, 1)
	noErr(t, err, "ListQueued")
	if len(head) == 0 {
		t.Fatal("no job queued")
	}
	return head[0].ID
}

// claimOneOfHead claims for req.WorkerID one of the first three queued jobs
// (pick picks which, modulo how many there are), as racing schedulers would:
// ErrNoJob when none is queued or another claimer took it first. It takes
// no *testing.T, for goroutines.
func claimOneOfHead(ctx context.Context, s store.Store, req store.ClaimRequest, pick int) (store.Job, error) {
	head, err := s.ListQueued(ctx, nil, 3)
	if err != nil {
		return store.Job{}, err
	}
	if len(head) == 0 {
		return store.Job{}, store.ErrNoJob
	}
	req.JobID = head[pick%len(head)].ID
	j, _, err := s.ClaimJob(ctx, req)
	return j, err
}

// transition applies a transition from the job's current state.
func transition(t *testing.T, s store.Store, j store.Job, tr store.JobTransition) store.Job {
	t.Helper()
	tr.JobID, tr.ExpectAttempt = j.ID, j.Attempt
	if tr.From == "" {
		tr.From = j.Status
	}
	if tr.Now.IsZero() {
		tr.Now = at(time.Hour)
	}
	nj, err := s.TransitionJob(t.Context(), tr)
	if err != nil {
		t.Fatalf("TransitionJob %s → %s: %v", j.Status, tr.To, err)
	}
	equal(t, nj, getJob(t, s, j.ID), fmt.Sprintf("TransitionJob %s → %s returned the job", j.Status, tr.To))
	return nj
}

func getJob(t *testing.T, s store.Store, id string) store.Job {
	t.Helper()
	j, err := s.GetJob(t.Context(), id)
	if err != nil {
		t.Fatalf("GetJob: %v", err)
	}
	return j
}

func getWorker(t *testing.T, s store.Store, id string) store.Worker {
	t.Helper()
	w, err := s.GetWorker(t.Context(), id)
	if err != nil {
		t.Fatalf("GetWorker: %v", err)
	}
	return w
}

func attempts(t *testing.T, s store.Store, jobID string) []store.Attempt {
	t.Helper()
	as, err := s.ListAttempts(t.Context(), jobID)
	if err != nil {
		t.Fatalf("ListAttempts: %v", err)
	}
	return as
}

// chain returns the whole audit log after checking its hash chain.
func chain(t *testing.T, s store.Store) []audit.Record {
	t.Helper()
	recs, err := s.ListAudit(t.Context(), 0, 0)
	if err != nil {
		t.Fatalf("ListAudit: %v", err)
	}
	if err := audit.Verify(recs); err != nil {
		t.Fatalf("audit chain broken: %v", err)
	}
	for i, r := range recs {
		if r.Seq != int64(i+1) {
			t.Fatalf("audit record %d has seq %d", i, r.Seq)
		}
	}
	return recs
}

func wantErr(t *testing.T, err, want error, what string) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("%s: got error %v, want %v", what, err, want)
	}
}

func noErr(t *testing.T, err error, what string) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

func equal(t *testing.T, got, want any, what string) {
	t.Helper()
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%s:\n got  %+v\n want %+v", what, show(got), show(want))
	}
}

// show prints pointers' targets so time fields are readable in failures.
func show(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprintf("%+v", v)
	}
	return string(b)
}
