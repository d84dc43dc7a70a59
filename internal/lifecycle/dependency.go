package lifecycle

import (
	"fmt"
	"strings"

	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
)

// When a dependency is met: how the job depended on must end.
const (
	AfterOK     = "ok"     // it completed
	AfterAny    = "any"    // it ended, however
	AfterFailed = "failed" // it failed
)

// Whens lists the conditions a dependency may name, as the API spells them.
var Whens = []string{AfterOK, AfterAny, AfterFailed}

// ValidWhen reports whether w is one of Whens.
func ValidWhen(w string) bool { return w == AfterOK || w == AfterAny || w == AfterFailed }

// States of a dependency.
const (
	DependencyPending = ""      // the job depended on has not ended
	DependencyMet     = "met"   // it ended as asked
	DependencyUnmet   = "unmet" // it ended otherwise (or no longer exists): it never will
)

// DependencyState is what a job depended on ending in status means for a
// dependency on it with condition when. A job that has not ended leaves
// it pending; a cancelled job meets only "any".
func DependencyState(when string, status protocol.JobStatus) string {
	switch {
	case !status.Terminal():
		return DependencyPending
	case when == AfterAny,
		when == AfterOK && status == protocol.JobCompleted,
		when == AfterFailed && status == protocol.JobFailed:
		return DependencyMet
	}
	return DependencyUnmet
}

// Dependency is one job a waiting job depends on, as the decision reads it.
type Dependency struct {
	JobID string
	When  string
	State string // DependencyPending, DependencyMet or DependencyUnmet
	// Status is the status of the job depended on ("" when it no longer
	// exists).
	Status protocol.JobStatus
}

// Unmet describes why d can never be met, for the job's error and its
// waiting detail.
func (d Dependency) Unmet() string {
	ended := "ended " + string(d.Status)
	if d.Status == "" {
		ended = "no longer exists"
	}
	return fmt.Sprintf("dependency %s %s; this job needed it to %s", d.JobID, ended, whenText(d.When))
}

// Awaited describes a pending d, for a waiting job's detail.
func (d Dependency) Awaited() string {
	return fmt.Sprintf("%s to %s (%s now)", d.JobID, whenText(d.When), d.Status)
}

func whenText(when string) string {
	switch when {
	case AfterOK:
		return "complete"
	case AfterFailed:
		return "fail"
	}
	return "end"
}

// OnDependencies decides for a waiting job whose dependencies are deps: it
// joins the queue when all are met; when one can never be met it ends
// cancelled, naming it, unless the submitter asked to hold it (hold), in
// which case it stays waiting until someone cancels it. ok is false when
// the job stays as it is.
func OnDependencies(j Job, deps []Dependency, hold bool) (s Step, ok bool) {
	if j.Status != protocol.JobWaiting {
		return Step{}, false
	}
	var unmet []string
	pending := false
	for _, d := range deps {
		switch d.State {
		case DependencyUnmet:
			unmet = append(unmet, d.Unmet())
		case DependencyPending:
			pending = true
		}
	}
	switch {
	case len(unmet) > 0 && !hold:
		return Step{To: protocol.JobCancelled, By: DependsOn, Error: text("%s", strings.Join(unmet, "; "))}, true
	case len(unmet) > 0, pending:
		return Step{}, false
	}
	return Step{To: protocol.JobQueued, By: DependsOn, Error: text("")}, true
}
