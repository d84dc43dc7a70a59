package storetest

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/lifecycle"
	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
	"github.com/simpletuner/simpletuner-orchestration/internal/store"
)

var dependencyTests = []test{
	{"DependencyEveryWhenAndEnd", testDependencyEveryWhenAndEnd},
	{"DependencyWaitsForAll", testDependencyWaitsForAll},
	{"DependencyHoldUnmet", testDependencyHoldUnmet},
	{"DependencyChainMiddleFails", testDependencyChainMiddleFails},
	{"DependencyCancelCascades", testDependencyCancelCascades},
	{"DependencyAlreadyEndedAtSubmit", testDependencyAlreadyEndedAtSubmit},
	{"DependencyApproval", testDependencyApproval},
	{"DependencyCountsTowardMaxQueued", testDependencyCountsTowardMaxQueued},
	{"DependencyEndRacesSubmit", testDependencyEndRacesSubmit},
	{"DependencyRowsGoWithTheJob", testDependencyRowsGoWithTheJob},
	{"DependentsBounded", testDependentsBounded},
}

// after is a submit's dependencies on ids, all with condition when.
func after(when string, hold bool, ids ...string) func(*store.Job) {
	return func(j *store.Job) {
		for _, id := range ids {
			j.DependsOn = append(j.DependsOn, lifecycle.Dependency{JobID: id, When: when})
		}
		j.HoldUnmet = hold
	}
}

// ended takes a queued job to end: through an attempt for completed and
// failed, by a cancel before it started for cancelled.
func ended(t *testing.T, s store.Store, j store.Job, end protocol.JobStatus) store.Job {
	t.Helper()
	if end == protocol.JobCancelled {
		return transition(t, s, j, store.JobTransition{Step: lifecycle.Step{To: end, By: lifecycle.Cancel}})
	}
	w := newWorker(t, s)
	j, _, err := s.ClaimJob(t.Context(), store.ClaimRequest{WorkerID: w.ID, JobID: j.ID, UploadTokenHash: "up",
		AckDeadline: at(time.Minute), Now: at(time.Second)})
	noErr(t, err, "claim "+j.ID)
	j = transition(t, s, j, store.JobTransition{Step: lifecycle.Step{To: protocol.JobRunning, By: lifecycle.Report, Ack: true}})
	return finish(t, s, j, end)
}

func wantStatus(t *testing.T, s store.Store, id string, want protocol.JobStatus, what string) store.Job {
	t.Helper()
	j := getJob(t, s, id)
	if j.Status != want {
		t.Fatalf("%s: job %s is %s (error %q), want %s", what, id, j.Status, j.Error, want)
	}
	return j
}

// Each condition against each way its job can end: the waiting job joins
// the queue when the end meets it, and otherwise ends cancelled with an
// error naming the job and how it ended.
func testDependencyEveryWhenAndEnd(t *testing.T, s store.Store) {
	for _, when := range lifecycle.Whens {
		for _, end := range []protocol.JobStatus{protocol.JobCompleted, protocol.JobFailed, protocol.JobCancelled} {
			name := when + " after " + string(end)
			dep := newJob(t, s)
			w := newJob(t, s, after(when, false, dep.ID))
			if w.Status != protocol.JobWaiting {
				t.Fatalf("%s: inserted %s, want waiting", name, w.Status)
			}
			if q, err := s.ListQueued(t.Context(), nil, 100); err != nil || containsJob(q, w.ID) {
				t.Fatalf("%s: a waiting job is in the queue (%v)", name, err)
			}
			ended(t, s, dep, end)
			got := getJob(t, s, w.ID)
			if lifecycle.DependencyState(when, end) == lifecycle.DependencyMet {
				if got.Status != protocol.JobQueued || got.Error != "" {
					t.Fatalf("%s: %s %q, want queued", name, got.Status, got.Error)
				}
				if q, err := s.ListQueued(t.Context(), nil, 100); err != nil || !containsJob(q, w.ID) {
					t.Fatalf("%s: the released job is not in the queue (%v)", name, err)
				}
			} else if got.Status != protocol.JobCancelled || !strings.Contains(got.Error, "dependency "+dep.ID+" ended "+string(end)) {
				t.Fatalf("%s: %s %q, want cancelled naming %s", name, got.Status, got.Error, dep.ID)
			}
			deps, hold, err := s.Dependencies(t.Context(), w.ID)
			noErr(t, err, "Dependencies")
			equal(t, deps, []lifecycle.Dependency{{JobID: dep.ID, When: when, State: lifecycle.DependencyState(when, end), Status: end}}, name+": dependencies")
			if hold {
				t.Fatalf("%s: held", name)
			}
		}
	}
	checkCounts(t, s, "after every condition")
}

func containsJob(q []store.QueuedJob, id string) bool {
	for _, j := range q {
		if j.ID == id {
			return true
		}
	}
	return false
}

// A job waiting for several joins the queue only when the last one ends.
func testDependencyWaitsForAll(t *testing.T, s store.Store) {
	a, b := newJob(t, s), newJob(t, s)
	w := newJob(t, s, after(lifecycle.AfterOK, false, a.ID, b.ID))
	ended(t, s, b, protocol.JobCompleted)
	wantStatus(t, s, w.ID, protocol.JobWaiting, "one of two completed")
	deps, _, err := s.Dependencies(t.Context(), w.ID)
	noErr(t, err, "Dependencies")
	equal(t, deps, []lifecycle.Dependency{{JobID: a.ID, When: "ok", Status: protocol.JobQueued}, {JobID: b.ID, When: "ok", State: "met", Status: protocol.JobCompleted}}, "dependencies, in the submit's order")
	ended(t, s, a, protocol.JobCompleted)
	wantStatus(t, s, w.ID, protocol.JobQueued, "both completed")
	none, hold, err := s.Dependencies(t.Context(), a.ID)
	if err != nil || len(none) != 0 || hold {
		t.Fatalf("a job without dependencies: %v %v %v", none, hold, err)
	}
}

// A job held on unmet dependencies stays waiting, its dependency unmet,
// until someone cancels it.
func testDependencyHoldUnmet(t *testing.T, s store.Store) {
	dep := newJob(t, s)
	w := newJob(t, s, after(lifecycle.AfterOK, true, dep.ID))
	ended(t, s, dep, protocol.JobFailed)
	w = wantStatus(t, s, w.ID, protocol.JobWaiting, "held on an unmet dependency")
	deps, hold, err := s.Dependencies(t.Context(), w.ID)
	noErr(t, err, "Dependencies")
	if !hold || deps[0].State != lifecycle.DependencyUnmet || deps[0].Status != protocol.JobFailed {
		t.Fatalf("held dependencies %+v, hold %v", deps, hold)
	}
	step, ok, err := lifecycle.OnCancel(w.Facts())
	if err != nil || !ok {
		t.Fatal(ok, err)
	}
	transition(t, s, w, store.JobTransition{Step: step})
	wantStatus(t, s, w.ID, protocol.JobCancelled, "cancelled")
	checkCounts(t, s, "after a held job's cancel")
}

// A chain of three where the middle one fails: the first's success
// releases the second, the second's failure ends the third, naming it.
func testDependencyChainMiddleFails(t *testing.T, s store.Store) {
	a := newJob(t, s)
	b := newJob(t, s, after(lifecycle.AfterOK, false, a.ID))
	c := newJob(t, s, after(lifecycle.AfterOK, false, b.ID))
	ended(t, s, a, protocol.JobCompleted)
	b = wantStatus(t, s, b.ID, protocol.JobQueued, "the middle after the first completed")
	wantStatus(t, s, c.ID, protocol.JobWaiting, "the last while the middle waits to run")
	ended(t, s, b, protocol.JobFailed)
	got := wantStatus(t, s, c.ID, protocol.JobCancelled, "the last after the middle failed")
	if want := "dependency " + b.ID + " ended failed; this job needed it to complete"; got.Error != want {
		t.Fatalf("error %q, want %q", got.Error, want)
	}
	var moves int
	for _, r := range chain(t, s) {
		if r.TargetID == c.ID && r.Action == "job.transition" {
			moves++
		}
	}
	if moves != 1 {
		t.Fatalf("%d audit records of the last job's move, want 1", moves)
	}
	checkCounts(t, s, "after the chain")
}

// A dependency that can never be met cancels its dependents in the same
// transaction, and theirs in turn; a cancel of a waiting job does too.
func testDependencyCancelCascades(t *testing.T, s store.Store) {
	a := newJob(t, s)
	b := newJob(t, s, after(lifecycle.AfterOK, false, a.ID))
	c := newJob(t, s, after(lifecycle.AfterAny, false, b.ID))
	d := newJob(t, s, after(lifecycle.AfterOK, false, c.ID))
	ended(t, s, a, protocol.JobCancelled)
	wantStatus(t, s, b.ID, protocol.JobCancelled, "b after a was cancelled")
	// b ended (cancelled): "any" is met, so c joins the queue.
	wantStatus(t, s, c.ID, protocol.JobQueued, "c after b ended")
	wantStatus(t, s, d.ID, protocol.JobWaiting, "d while c waits to run")

	x := newJob(t, s)
	y := newJob(t, s, after(lifecycle.AfterOK, false, x.ID))
	z := newJob(t, s, after(lifecycle.AfterOK, false, y.ID))
	step, _, _ := lifecycle.OnCancel(y.Facts())
	transition(t, s, y, store.JobTransition{Step: step})
	wantStatus(t, s, z.ID, protocol.JobCancelled, "z after its waiting dependency was cancelled")
	wantStatus(t, s, x.ID, protocol.JobQueued, "x, which nothing changed")
	checkCounts(t, s, "after the cascades")
}

// Dependencies that already ended decide at submit: all met, and the job
// is queued at once; one that can never be met refuses the submit (unless
// held), as does an unknown job, and a refused submit stores nothing.
func testDependencyAlreadyEndedAtSubmit(t *testing.T, s store.Store) {
	ok, bad := newJob(t, s), newJob(t, s)
	ended(t, s, ok, protocol.JobCompleted)
	ended(t, s, bad, protocol.JobFailed)
	if j := newJob(t, s, after(lifecycle.AfterOK, false, ok.ID)); j.Status != protocol.JobQueued {
		t.Fatalf("inserted %s, want queued", j.Status)
	}
	before := len(allJobs(t, s))
	for _, tc := range []struct {
		deps func(*store.Job)
		want error
		text string
	}{
		{after(lifecycle.AfterOK, false, ok.ID, bad.ID), store.ErrDependencyUnmet, "depends_on[1]: job " + bad.ID + " already ended failed"},
		{after(lifecycle.AfterOK, false, ok.ID, "j_nonexistent"), store.ErrNotFound, "depends_on[1]: "},
	} {
		j := store.Job{ID: protocol.NewJobID(), Config: []byte(`{}`), Target: protocol.TargetAuto, GPUCount: 1, Status: protocol.JobQueued, CreatedAt: t0}
		tc.deps(&j)
		_, err := s.InsertJob(t.Context(), j, rec("job.submit"))
		wantErr(t, err, tc.want, "insert")
		if !strings.Contains(err.Error(), tc.text) {
			t.Fatalf("error %q does not say %q", err, tc.text)
		}
	}
	if n := len(allJobs(t, s)); n != before {
		t.Fatalf("%d jobs after refused inserts, want %d", n, before)
	}
	held := newJob(t, s, after(lifecycle.AfterOK, true, bad.ID))
	wantStatus(t, s, held.ID, protocol.JobWaiting, "held on a dependency that already failed")
	checkCounts(t, s, "after the submits")
}

// A job held for approval that depends on others waits for them once
// approved, or joins the queue when they already ended as asked.
func testDependencyApproval(t *testing.T, s store.Store) {
	dep := newJob(t, s)
	j, r := held(t, s, after(lifecycle.AfterOK, false, dep.ID))
	nj, _, err := s.DecideApproval(t.Context(), store.ApprovalDecision{RequestID: r.ID, Approve: true, By: "person:p_lead", At: at(time.Minute)})
	noErr(t, err, "approve")
	if nj.Status != protocol.JobWaiting {
		t.Fatalf("approved job is %s, want waiting", nj.Status)
	}
	ended(t, s, dep, protocol.JobCompleted)
	wantStatus(t, s, j.ID, protocol.JobQueued, "approved job after its dependency completed")

	dep2 := newJob(t, s)
	j2, r2 := held(t, s, after(lifecycle.AfterOK, false, dep2.ID))
	ended(t, s, dep2, protocol.JobCompleted)
	wantStatus(t, s, j2.ID, protocol.JobPendingApproval, "held job after its dependency completed")
	nj, _, err = s.DecideApproval(t.Context(), store.ApprovalDecision{RequestID: r2.ID, Approve: true, By: "person:p_lead", At: at(time.Minute)})
	noErr(t, err, "approve")
	equal(t, nj, wantStatus(t, s, j2.ID, protocol.JobQueued, "approved after its dependency completed"), "the job DecideApproval returned")
	checkCounts(t, s, "after the approvals")
}

// Waiting jobs count toward a team's max_queued: they are queued work.
func testDependencyCountsTowardMaxQueued(t *testing.T, s store.Store) {
	dep := newJob(t, s, teamJob("nlp", 0))
	j := store.Job{ID: protocol.NewJobID(), Config: []byte(`{}`), Target: protocol.TargetAuto, GPUCount: 1,
		Status: protocol.JobQueued, Team: "nlp", CreatedAt: t0}
	after(lifecycle.AfterOK, false, dep.ID)(&j)
	_, err := s.InsertTeamJob(t.Context(), j, 2, nil)
	noErr(t, err, "the second job")
	j.ID = protocol.NewJobID()
	_, err = s.InsertTeamJob(t.Context(), j, 2, nil)
	wantErr(t, err, store.ErrQueueFull, "a third job past max_queued 2")
}

// A dependency ending while a job naming it is inserted: whichever
// commits first, the new job never waits for a job that already ended.
func testDependencyEndRacesSubmit(t *testing.T, s store.Store) {
	const rounds = 20
	deps := make([]store.Job, rounds)
	for i := range deps {
		deps[i] = newJob(t, s)
	}
	ids := make([]string, rounds)
	var wg sync.WaitGroup
	for i := range rounds {
		wg.Add(2)
		go func() {
			defer wg.Done()
			_, err := s.TransitionJob(t.Context(), store.JobTransition{JobID: deps[i].ID, From: protocol.JobQueued,
				Step: lifecycle.Step{To: protocol.JobCancelled, By: lifecycle.Cancel}, Now: at(time.Hour)})
			if err != nil {
				t.Errorf("cancel: %v", err)
			}
		}()
		go func() {
			defer wg.Done()
			j := store.Job{ID: protocol.NewJobID(), Config: []byte(`{}`), Target: protocol.TargetAuto, GPUCount: 1,
				Status: protocol.JobQueued, CreatedAt: t0}
			after(lifecycle.AfterAny, false, deps[i].ID)(&j)
			if _, err := s.InsertJob(t.Context(), j, nil); err != nil {
				t.Errorf("insert: %v", err)
			}
			ids[i] = j.ID
		}()
	}
	wg.Wait()
	for _, id := range ids {
		if id != "" {
			wantStatus(t, s, id, protocol.JobQueued, "a job whose dependency was cancelled as it was inserted")
		}
	}
}

// Retention deletes a finished job's dependencies with it, and a
// dependent reports a dependency retention deleted as gone.
func testDependencyRowsGoWithTheJob(t *testing.T, s store.Store) {
	dep := newJob(t, s)
	w := newJob(t, s, after(lifecycle.AfterAny, false, dep.ID))
	ended(t, s, dep, protocol.JobCompleted)
	n, err := s.DeleteJobs(t.Context(), []string{dep.ID}, at(2*time.Hour))
	if err != nil || n != 1 {
		t.Fatalf("DeleteJobs: %d %v", n, err)
	}
	deps, _, err := s.Dependencies(t.Context(), w.ID)
	noErr(t, err, "Dependencies")
	equal(t, deps, []lifecycle.Dependency{{JobID: dep.ID, When: "any", State: "met"}}, "a deleted dependency")
	w = wantStatus(t, s, w.ID, protocol.JobQueued, "dependent")
	step, _, _ := lifecycle.OnCancel(w.Facts())
	transition(t, s, w, store.JobTransition{Step: step})
	n, err = s.DeleteJobs(t.Context(), []string{w.ID}, at(2*time.Hour))
	if err != nil || n != 1 {
		t.Fatalf("DeleteJobs of the dependent: %d %v", n, err)
	}
	if deps, _, err = s.Dependencies(t.Context(), w.ID); err != nil || len(deps) != 0 {
		t.Fatalf("dependencies of a deleted job: %v %v", deps, err)
	}
}

// At most MaxDependents jobs wait for one job; its end moves them all,
// and then it may be depended on again (by jobs that are queued at once).
func testDependentsBounded(t *testing.T, s store.Store) {
	dep := newJob(t, s)
	j := store.Job{Config: []byte(`{}`), Target: protocol.TargetAuto, Status: protocol.JobQueued, CreatedAt: t0}
	after(lifecycle.AfterAny, false, dep.ID)(&j)
	for range store.MaxDependents {
		j.ID = protocol.NewJobID()
		if _, err := s.InsertJob(t.Context(), j, nil); err != nil {
			t.Fatalf("insert: %v", err)
		}
	}
	j.ID = protocol.NewJobID()
	_, err := s.InsertJob(t.Context(), j, nil)
	wantErr(t, err, store.ErrTooManyDependents, "one waiting job too many")
	if !strings.Contains(err.Error(), "depends_on[0]: job "+dep.ID+" already has 1000 jobs waiting for it") {
		t.Fatalf("error %q", err)
	}
	ended(t, s, dep, protocol.JobCancelled)
	if q, err := s.ListQueued(t.Context(), nil, store.MaxDependents+10); err != nil || len(q) != store.MaxDependents {
		t.Fatalf("%d jobs queued after the end (%v), want %d", len(q), err, store.MaxDependents)
	}
	if got := newJob(t, s, after(lifecycle.AfterAny, false, dep.ID)); got.Status != protocol.JobQueued {
		t.Fatalf("a job after the end: %s", got.Status)
	}
	checkCounts(t, s, "after a thousand released")
}
