package lifecycle

import (
	"testing"

	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
)

// Each condition is met by the endings it names and by no other; a job
// still running leaves every condition pending.
func TestDependencyState(t *testing.T) {
	want := map[string]map[protocol.JobStatus]string{
		AfterOK:     {protocol.JobCompleted: DependencyMet, protocol.JobFailed: DependencyUnmet, protocol.JobCancelled: DependencyUnmet},
		AfterFailed: {protocol.JobCompleted: DependencyUnmet, protocol.JobFailed: DependencyMet, protocol.JobCancelled: DependencyUnmet},
		AfterAny:    {protocol.JobCompleted: DependencyMet, protocol.JobFailed: DependencyMet, protocol.JobCancelled: DependencyMet},
	}
	for _, when := range Whens {
		for _, st := range States {
			w, ok := want[when][st]
			if !ok {
				w = DependencyPending
			}
			if got := DependencyState(when, st); got != w {
				t.Errorf("when %s, dependency %s: %q, want %q", when, st, got, w)
			}
		}
	}
	if ValidWhen("afterok") || !ValidWhen(AfterFailed) {
		t.Error("ValidWhen")
	}
}

// A waiting job joins the queue once every dependency is met, ends
// cancelled naming the one that can never be met, or stays waiting when
// its submitter asked to hold it.
func TestOnDependencies(t *testing.T) {
	j := Job{ID: "j_c", Status: protocol.JobWaiting}
	met := Dependency{JobID: "j_a", When: AfterOK, State: DependencyMet, Status: protocol.JobCompleted}
	pending := Dependency{JobID: "j_b", When: AfterOK}
	failed := Dependency{JobID: "j_b", When: AfterOK, State: DependencyUnmet, Status: protocol.JobFailed}
	gone := Dependency{JobID: "j_d", When: AfterFailed, State: DependencyUnmet}

	if s, ok := OnDependencies(j, []Dependency{met}, false); !ok || s.To != protocol.JobQueued || s.By != DependsOn {
		t.Fatalf("all met: %+v %v", s, ok)
	}
	if _, ok := OnDependencies(j, []Dependency{met, pending}, false); ok {
		t.Fatal("a pending dependency let the job move")
	}
	s, ok := OnDependencies(j, []Dependency{met, failed, gone}, false)
	want := "dependency j_b ended failed; this job needed it to complete; dependency j_d no longer exists; this job needed it to fail"
	if !ok || s.To != protocol.JobCancelled || s.By != DependsOn || *s.Error != want {
		t.Fatalf("unmet: %+v %v, error %q", s, ok, *s.Error)
	}
	if _, err := Check(protocol.JobWaiting, s); err != nil {
		t.Fatal(err)
	}
	if _, ok := OnDependencies(j, []Dependency{failed, pending}, true); ok {
		t.Fatal("a held job moved")
	}
	if _, ok := OnDependencies(Job{ID: "j_q", Status: protocol.JobQueued}, []Dependency{met}, false); ok {
		t.Fatal("a queued job moved on its dependencies")
	}
	if s, ok, err := OnCancel(j); err != nil || !ok || s.To != protocol.JobCancelled {
		t.Fatalf("cancel of a waiting job: %+v %v %v", s, ok, err)
	}
	if _, ok := OnPreempt(j); ok {
		t.Error("a waiting job was preempted")
	}
}
