package storetest

import (
	"encoding/json"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/audit"
	"github.com/simpletuner/simpletuner-orchestration/internal/lifecycle"
	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
	"github.com/simpletuner/simpletuner-orchestration/internal/store"
)

var approvalTests = []test{
	{"HeldJobWaitsOutsideTheQueue", testHeldJobWaitsOutsideTheQueue},
	{"ApproveQueuesTheHeldJob", testApproveQueuesTheHeldJob},
	{"RejectCancelsWithTheReason", testRejectCancelsWithTheReason},
	{"CancelHeldJobCancelsItsRequest", testCancelHeldJobCancelsItsRequest},
	{"ConcurrentDecisionsOneWins", testConcurrentDecisionsOneWins},
	{"ApprovalRequestsByTeam", testApprovalRequestsByTeam},
	{"SubmitCountsEveryInsert", testSubmitCountsEveryInsert},
	{"ApprovalRules", testApprovalRules},
}

// held inserts a job held for approval by rule "big".
func held(t *testing.T, s store.Store, mod ...func(*store.Job)) (store.Job, store.ApprovalRequest) {
	t.Helper()
	j := store.Job{ID: protocol.NewJobID(), ConfigName: "cfg", Config: json.RawMessage(`{"lr":1}`), Target: protocol.TargetAuto,
		GPUCount: 2, MaxRetries: 3, SubmittedBy: "person:p_member", Team: "alpha", CreatedAt: t0}
	for _, m := range mod {
		m(&j)
	}
	hours := 4.5
	gj, r, err := s.InsertHeldJob(t.Context(), j, store.ApprovalRequest{RuleID: "ar_1", RuleName: "big",
		Reason: "asks for 2 GPUs, more than 1", GPUHours: &hours}, rec("job.submit"))
	noErr(t, err, "InsertHeldJob")
	equal(t, gj, getJob(t, s, j.ID), "InsertHeldJob returned the stored job")
	got, err := s.GetApprovalRequest(t.Context(), r.ID)
	noErr(t, err, "GetApprovalRequest")
	equal(t, got, r, "InsertHeldJob returned the stored request")
	return gj, r
}

func testHeldJobWaitsOutsideTheQueue(t *testing.T, s store.Store) {
	j, r := held(t, s)
	if j.Status != protocol.JobPendingApproval || r.Status != store.ApprovalPending || r.ID <= 0 ||
		r.JobID != j.ID || r.Team != "alpha" || r.RequestedBy != "person:p_member" || r.Approver != "lead" ||
		r.ConfigName != "cfg" || r.JobStatus != string(protocol.JobPendingApproval) || *r.GPUHours != 4.5 {
		t.Fatalf("held job %+v, request %+v", j, r)
	}
	_, r2 := held(t, s)
	if r2.ID <= r.ID {
		t.Fatalf("request ids %d then %d: not increasing", r.ID, r2.ID)
	}
	byJob, err := s.GetApprovalRequestByJob(t.Context(), j.ID)
	noErr(t, err, "GetApprovalRequestByJob")
	equal(t, byJob, r, "request by job")
	_, err = s.GetApprovalRequest(t.Context(), 999999)
	wantErr(t, err, store.ErrNotFound, "unknown request")
	// The scheduler reads only the queue: a held job is never offered.
	q, err := s.ListQueued(t.Context(), nil, 10)
	noErr(t, err, "ListQueued")
	equal(t, len(q), 0, "queued jobs while two are held")
	gpus, whole, err := s.QueuedGPUDemand(t.Context())
	noErr(t, err, "QueuedGPUDemand")
	equal(t, [2]int{gpus, whole}, [2]int{0, 0}, "GPU demand of held jobs")
	w := newWorker(t, s)
	_, _, err = s.ClaimJob(t.Context(), store.ClaimRequest{WorkerID: w.ID, JobID: j.ID, UploadTokenHash: "up", AckDeadline: at(time.Minute)})
	wantErr(t, err, store.ErrNoJob, "claim of a held job")
	checkCounts(t, s, "with held jobs")
	list, total, err := s.ListJobs(t.Context(), store.JobFilter{Statuses: []protocol.JobStatus{protocol.JobPendingApproval}})
	noErr(t, err, "ListJobs pending_approval")
	equal(t, [2]int{len(list), total}, [2]int{2, 2}, "held jobs listed")
}

func testApproveQueuesTheHeldJob(t *testing.T, s store.Store) {
	j, r := held(t, s)
	audits := len(chain(t, s))
	nj, nr, err := s.DecideApproval(t.Context(), store.ApprovalDecision{RequestID: r.ID, Approve: true, By: "person:p_lead",
		Notes: "fine", At: at(time.Hour), Audit: rec("approval.approve")})
	noErr(t, err, "approve")
	if nj.Status != protocol.JobQueued || nj.Error != "" || nr.Status != store.ApprovalApproved || nr.ReviewedBy != "person:p_lead" ||
		nr.ReviewNotes != "fine" || nr.ReviewedAt == nil || !nr.ReviewedAt.Equal(at(time.Hour)) || nr.JobStatus != "queued" {
		t.Fatalf("approved: job %+v, request %+v", nj, nr)
	}
	equal(t, nj, getJob(t, s, j.ID), "approved job as stored")
	got, _ := s.GetApprovalRequest(t.Context(), r.ID)
	equal(t, got, nr, "approved request as stored")
	equal(t, len(chain(t, s)), audits+1, "audit records after the approval")
	q, err := s.ListQueued(t.Context(), nil, 10)
	noErr(t, err, "ListQueued")
	equal(t, len(q), 1, "queued jobs after the approval")
	checkCounts(t, s, "after the approval")
	// A decided request is decided for good.
	_, _, err = s.DecideApproval(t.Context(), store.ApprovalDecision{RequestID: r.ID, By: "person:p_lead", Reason: "no"})
	wantErr(t, err, store.ErrConflict, "reject after approve")
	equal(t, getJob(t, s, j.ID), nj, "job after a refused decision")
	_, _, err = s.DecideApproval(t.Context(), store.ApprovalDecision{RequestID: 424242, Approve: true, By: "x"})
	wantErr(t, err, store.ErrNotFound, "decision on an unknown request")
}

func testRejectCancelsWithTheReason(t *testing.T, s store.Store) {
	j, r := held(t, s)
	_, _, err := s.DecideApproval(t.Context(), store.ApprovalDecision{RequestID: r.ID, By: "person:p_lead", Reason: "  "})
	if err == nil {
		t.Fatal("a rejection without a reason was accepted")
	}
	equal(t, getJob(t, s, j.ID), j, "job after a rejection without a reason")
	nj, nr, err := s.DecideApproval(t.Context(), store.ApprovalDecision{RequestID: r.ID, By: "person:p_lead",
		Reason: "8 GPUs for a smoke test", At: at(time.Hour), Audit: rec("approval.reject")})
	noErr(t, err, "reject")
	if nj.Status != protocol.JobCancelled || nj.Error != "rejected by person:p_lead: 8 GPUs for a smoke test" || nj.EndedAt == nil ||
		nr.Status != store.ApprovalRejected || nr.ReviewNotes != "8 GPUs for a smoke test" {
		t.Fatalf("rejected: job %+v, request %+v", nj, nr)
	}
	equal(t, nj, getJob(t, s, j.ID), "rejected job as stored")
	checkCounts(t, s, "after the rejection")
	// Retention deletes the request with its job.
	n, err := s.DeleteJobs(t.Context(), []string{j.ID}, at(2*time.Hour))
	noErr(t, err, "DeleteJobs")
	equal(t, n, 1, "jobs deleted")
	_, err = s.GetApprovalRequest(t.Context(), r.ID)
	wantErr(t, err, store.ErrNotFound, "request of a deleted job")
}

func testCancelHeldJobCancelsItsRequest(t *testing.T, s store.Store) {
	j, r := held(t, s)
	step, ok, err := lifecycle.OnCancel(j.Facts())
	if err != nil || !ok {
		t.Fatalf("OnCancel: %v %v", ok, err)
	}
	cancel := rec("job.cancel")
	cancel.Actor = "person:p_member"
	nj := transition(t, s, j, store.JobTransition{Step: step, Now: at(time.Minute), Audit: cancel})
	equal(t, nj.Status, protocol.JobCancelled, "cancelled held job")
	got, err := s.GetApprovalRequest(t.Context(), r.ID)
	noErr(t, err, "GetApprovalRequest")
	if got.Status != store.ApprovalCancelled || got.ReviewedBy != "person:p_member" || got.JobStatus != "cancelled" {
		t.Fatalf("request of a cancelled job: %+v", got)
	}
	_, _, err = s.DecideApproval(t.Context(), store.ApprovalDecision{RequestID: r.ID, Approve: true, By: "person:p_lead"})
	wantErr(t, err, store.ErrConflict, "approval of a cancelled job")
	n, err := s.CountPendingApprovals(t.Context(), nil)
	noErr(t, err, "CountPendingApprovals")
	equal(t, n, 0, "pending after the cancel")
}

// Two leads deciding at once: exactly one decision takes effect.
func testConcurrentDecisionsOneWins(t *testing.T, s store.Store) {
	j, r := held(t, s)
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i := range errs {
		wg.Go(func() {
			_, _, errs[i] = s.DecideApproval(t.Context(), store.ApprovalDecision{RequestID: r.ID, Approve: i == 0,
				By: "person:p_lead", Reason: "no"})
		})
	}
	wg.Wait()
	won := 0
	for _, err := range errs {
		if err == nil {
			won++
		} else {
			wantErr(t, err, store.ErrConflict, "the losing decision")
		}
	}
	equal(t, won, 1, "decisions that took effect")
	got := getJob(t, s, j.ID)
	if got.Status != protocol.JobQueued && got.Status != protocol.JobCancelled {
		t.Fatalf("job after two decisions: %s", got.Status)
	}
	checkCounts(t, s, "after two decisions")
}

func testApprovalRequestsByTeam(t *testing.T, s store.Store) {
	_, a1 := held(t, s)
	_, b1 := held(t, s, func(j *store.Job) { j.Team = "bravo" })
	_, a2 := held(t, s)
	_, _, err := s.DecideApproval(t.Context(), store.ApprovalDecision{RequestID: a1.ID, Approve: true, By: "x"})
	noErr(t, err, "approve")
	ids := func(f store.ApprovalFilter) ([]int64, int) {
		t.Helper()
		rs, total, err := s.ListApprovalRequests(t.Context(), f)
		noErr(t, err, "ListApprovalRequests")
		out := []int64{}
		for _, r := range rs {
			out = append(out, r.ID)
		}
		return out, total
	}
	got, total := ids(store.ApprovalFilter{})
	equal(t, got, []int64{a2.ID, b1.ID, a1.ID}, "every request, newest first")
	equal(t, total, 3, "total")
	got, total = ids(store.ApprovalFilter{Teams: []string{"alpha"}})
	equal(t, got, []int64{a2.ID, a1.ID}, "alpha's requests")
	equal(t, total, 2, "alpha's total")
	got, _ = ids(store.ApprovalFilter{Teams: []string{"alpha"}, Status: store.ApprovalPending})
	equal(t, got, []int64{a2.ID}, "alpha's pending requests")
	got, total = ids(store.ApprovalFilter{Limit: 1, Offset: 1})
	equal(t, got, []int64{b1.ID}, "second page of one")
	equal(t, total, 3, "total of a page")
	got, total = ids(store.ApprovalFilter{Teams: []string{}})
	equal(t, [2]int{len(got), total}, [2]int{0, 0}, "no teams")
	for _, c := range []struct {
		teams []string
		want  int
	}{{nil, 2}, {[]string{"alpha"}, 1}, {[]string{"bravo"}, 1}, {[]string{"charlie"}, 0}, {[]string{}, 0}} {
		n, err := s.CountPendingApprovals(t.Context(), c.teams)
		noErr(t, err, "CountPendingApprovals")
		equal(t, n, c.want, "pending of teams")
	}
}

func testSubmitCountsEveryInsert(t *testing.T, s store.Store) {
	ever, today, err := s.SubmitCounts(t.Context(), "person:p_new", "2030-01-02")
	noErr(t, err, "SubmitCounts of nobody")
	equal(t, [2]int{ever, today}, [2]int{0, 0}, "counts before any submit")
	newJob(t, s, func(j *store.Job) { j.SubmittedBy = "person:p_new" })
	newJob(t, s, func(j *store.Job) { j.SubmittedBy = "person:p_new"; j.CreatedAt = t0.Add(-24 * time.Hour) })
	held(t, s, func(j *store.Job) { j.SubmittedBy = "person:p_new" })
	newJob(t, s, func(j *store.Job) { j.SubmittedBy = "person:p_other" })
	ever, today, err = s.SubmitCounts(t.Context(), "person:p_new", "2030-01-02")
	noErr(t, err, "SubmitCounts")
	equal(t, [2]int{ever, today}, [2]int{3, 2}, "counts after three submits, two today")
}

func testApprovalRules(t *testing.T, s store.Store) {
	a, err := s.CreateApprovalRule(t.Context(), store.ApprovalRule{Name: "big", Conditions: json.RawMessage(`{"gpus_over":4}`),
		CreatedBy: "admin:t", CreatedAt: t0}, rec("approval.rule_create"))
	noErr(t, err, "create")
	b, err := s.CreateApprovalRule(t.Context(), store.ApprovalRule{Name: "first", Conditions: json.RawMessage(`{"first_job":true}`),
		Approver: "admin", CreatedAt: t0}, nil)
	noErr(t, err, "create second")
	if a.ID == "" || a.Source != store.RuleFromAPI || a.Approver != "lead" || b.Position <= a.Position {
		t.Fatalf("rules %+v %+v", a, b)
	}
	_, err = s.CreateApprovalRule(t.Context(), store.ApprovalRule{Name: "big", CreatedAt: t0}, nil)
	wantErr(t, err, store.ErrDuplicate, "a name in use")
	got, err := s.GetApprovalRule(t.Context(), "big")
	noErr(t, err, "get by name")
	equal(t, got.ID, a.ID, "rule by name")
	u, err := s.UpdateApprovalRule(t.Context(), a.ID, func(r *store.ApprovalRule) (*audit.Record, error) {
		r.Conditions = json.RawMessage(`{"gpus_over":8}`)
		return rec("approval.rule_update"), nil
	})
	noErr(t, err, "update")
	got, _ = s.GetApprovalRule(t.Context(), a.ID)
	equal(t, got, u, "updated rule as stored")
	if !sameJSONText(got.Conditions, `{"gpus_over":8}`) {
		t.Fatalf("conditions %s", got.Conditions)
	}
	noErr(t, s.DeleteApprovalRule(t.Context(), a.ID, rec("approval.rule_delete")), "delete")
	wantErr(t, s.DeleteApprovalRule(t.Context(), a.ID, nil), store.ErrNotFound, "delete again")
	_, err = s.GetApprovalRule(t.Context(), a.ID)
	wantErr(t, err, store.ErrNotFound, "deleted rule")
	rs, err := s.ListApprovalRules(t.Context())
	noErr(t, err, "list")
	equal(t, len(rs), 1, "rules left")
}

func sameJSONText(raw json.RawMessage, want string) bool {
	var a, b any
	return json.Unmarshal(raw, &a) == nil && json.Unmarshal([]byte(want), &b) == nil && reflect.DeepEqual(a, b)
}
