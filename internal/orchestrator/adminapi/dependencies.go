package adminapi

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/simpletuner/simpletuner-orchestration/internal/api"
	"github.com/simpletuner/simpletuner-orchestration/internal/lifecycle"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator/web"
	"github.com/simpletuner/simpletuner-orchestration/internal/store"
)

// Why a waiting job waits.
const (
	WaitDependency               = "dependency"                 // a job it depends on has not ended
	WaitDependencyNeverSatisfied = "dependency_never_satisfied" // one ended otherwise and the job is held
)

// maxDependencies bounds depends_on: each is read, locked, in the submit's
// transaction.
const maxDependencies = 100

// OnUnmet values.
const (
	onUnmetCancel = "cancel"
	onUnmetHold   = "hold"
)

// readDependencies checks a submit's depends_on and on_unmet and puts them
// on j. A job c may not see is refused as if it did not exist.
func (a *API) readDependencies(ctx context.Context, c Caller, req api.Submit, j *store.Job) error {
	switch req.OnUnmet {
	case "", onUnmetCancel:
	case onUnmetHold:
		j.HoldUnmet = true
	default:
		return web.Invalid("field \"on_unmet\" must be %s or %s; got %q", onUnmetCancel, onUnmetHold, req.OnUnmet)
	}
	switch {
	case req.OnUnmet != "" && len(req.DependsOn) == 0:
		return web.Invalid("field \"on_unmet\" needs \"depends_on\"")
	case len(req.DependsOn) > maxDependencies:
		return web.Invalid("field \"depends_on\" names %d jobs; at most %d", len(req.DependsOn), maxDependencies)
	}
	seen := map[string]bool{}
	for i, d := range req.DependsOn {
		field := fmt.Sprintf("depends_on[%d]", i)
		when := d.When
		if when == "" {
			when = lifecycle.AfterOK
		}
		switch {
		case !lifecycle.ValidWhen(when):
			return web.Invalid("field %q must be %s; got %q", field+".when", strings.Join(lifecycle.Whens, ", "), d.When)
		case d.JobID == "":
			return web.Invalid("field %q is required", field+".job_id")
		case seen[d.JobID]:
			return web.Invalid("field %q: job %s is named twice", field+".job_id", d.JobID)
		}
		seen[d.JobID] = true
		dep, found, err := a.visibleJob(ctx, c, d.JobID)
		if err != nil {
			return err
		}
		if !found {
			return web.Invalid("field %q: no job %s", field+".job_id", d.JobID)
		}
		if lifecycle.DependencyState(when, dep.Status) == lifecycle.DependencyUnmet && !j.HoldUnmet {
			return web.Invalid("field %q: job %s already ended %s, so \"when\": %q can never be met (\"on_unmet\": %q keeps the job waiting all the same)",
				field, d.JobID, dep.Status, when, onUnmetHold)
		}
		j.DependsOn = append(j.DependsOn, lifecycle.Dependency{JobID: d.JobID, When: when})
	}
	return nil
}

// dependencyInsertError is the reply to an insert the store refused over a
// dependency: one that ended (or was deleted) since the checks above.
func dependencyInsertError(err error) error {
	if errors.Is(err, store.ErrDependencyUnmet) || errors.Is(err, store.ErrNotFound) || errors.Is(err, store.ErrTooManyDependents) {
		return web.Invalid("%v", err)
	}
	return err
}

// dependencyViews reads what j waits or waited for.
func (a *API) dependencyViews(ctx context.Context, v *api.Job) ([]lifecycle.Dependency, bool, error) {
	deps, hold, err := a.store.Dependencies(ctx, v.JobID)
	if err != nil || len(deps) == 0 {
		return nil, false, err
	}
	for _, d := range deps {
		state := d.State
		if state == lifecycle.DependencyPending {
			state = "pending"
		}
		v.DependsOn = append(v.DependsOn, api.DependencyView{JobID: d.JobID, When: d.When, State: state, Status: string(d.Status)})
	}
	v.OnUnmet = onUnmetCancel
	if hold {
		v.OnUnmet = onUnmetHold
	}
	return deps, hold, nil
}

// dependencyWait explains why a waiting job waits: for the dependencies
// still pending, or, held, on one that can never be met.
func dependencyWait(deps []lifecycle.Dependency) (reason, detail string) {
	var unmet, pending []string
	for _, d := range deps {
		switch d.State {
		case lifecycle.DependencyUnmet:
			unmet = append(unmet, d.Unmet())
		case lifecycle.DependencyPending:
			pending = append(pending, d.Awaited())
		}
	}
	if len(unmet) > 0 {
		return WaitDependencyNeverSatisfied, strings.Join(unmet, "; ") + "; it is held (on_unmet hold) until cancelled"
	}
	return WaitDependency, "it waits for " + strings.Join(pending, ", ")
}
