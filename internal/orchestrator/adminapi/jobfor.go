package adminapi

import (
	"context"
	"errors"
	"net/http"
	"regexp"

	"github.com/simpletuner/simpletuner-orchestration/internal/api"
	"github.com/simpletuner/simpletuner-orchestration/internal/auth"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator/web"
	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
	"github.com/simpletuner/simpletuner-orchestration/internal/store"
)

// The wall between teams. Every call that names a job reads it through
// jobFor, the only reader of a single job in this package: a job of a team
// the caller may not see answers exactly like an id that does not exist, so
// that ids cannot be probed.

// jobNotFound is the answer for an unknown job, and for a hidden one.
func jobNotFound(id string) error { return web.NotFound("Job not found: %s", id) }

// openReads reports whether every caller reads every team's jobs: [auth]
// visibility "all", or left empty with no team configured beyond the
// default one.
func (a *API) openReads() bool {
	opt := a.options()
	switch opt.Visibility {
	case "all":
		return true
	case "team":
		return false
	}
	for _, t := range opt.Teams.Teams {
		if t.Name != auth.DefaultTeam {
			return false
		}
	}
	return true
}

// sees reports whether c may see team's jobs at all.
func (a *API) sees(c Caller, team string) bool {
	return c.InTeam(team) || a.openReads()
}

// visibleTeams is the JobFilter.Teams of c's lists: nil for every team.
func (a *API) visibleTeams(c Caller) []string {
	if a.openReads() {
		return nil
	}
	return c.Teams()
}

// jobFor reads job id for c acting under scope: 404, as for an unknown id,
// when c may not see the job's team; 403 when it sees the job but may not
// act on it. Cancelling takes the job's team and, below a lead (queue.manage),
// the caller's own job.
func (a *API) jobFor(ctx context.Context, c Caller, id, scope string) (store.Job, error) {
	j, found, err := a.visibleJob(ctx, c, id)
	if err != nil {
		return store.Job{}, err
	}
	if !found {
		return store.Job{}, jobNotFound(id)
	}
	if !c.Has(scope) {
		return store.Job{}, web.Errorf(http.StatusForbidden, protocol.CodeForbidden, "this credential lacks the scope %q", scope)
	}
	if scope == auth.ScopeQueueView {
		return j, nil
	}
	// Anything beyond reading stays within the team, whatever the visibility.
	if !c.HasIn(j.Team, scope) {
		return store.Job{}, web.Errorf(http.StatusForbidden, protocol.CodeForbidden,
			"job %s belongs to team %q; this credential acts for team %q only", j.ID, auth.NormalTeam(j.Team), c.TeamOrDefault())
	}
	if scope == auth.ScopeQueueCancel && !c.HasIn(j.Team, auth.ScopeQueueManage) && j.SubmittedBy != c.Actor() {
		return store.Job{}, web.Errorf(http.StatusForbidden, protocol.CodeForbidden,
			"job %s was submitted by another credential; cancelling a teammate's job takes the scope %q", j.ID, auth.ScopeQueueManage)
	}
	return j, nil
}

// visibleJob reads job id as c may know of it: a job of a team c may not
// see is as absent as one that does not exist (found false).
func (a *API) visibleJob(ctx context.Context, c Caller, id string) (j store.Job, found bool, err error) {
	j, err = a.store.GetJob(ctx, id)
	if errors.Is(err, store.ErrNotFound) || (err == nil && !a.sees(c, j.Team)) {
		return store.Job{}, false, nil
	}
	return j, err == nil, err
}

// jobIDPattern finds job ids in the sentences of waiting_detail and
// error_message ("held for job X", "preempted by X").
var jobIDPattern = regexp.MustCompile(`\bj_[0-9a-z]{6,}\b`)

// hiddenJob stands in for the id of a job c may not see.
const hiddenJob = "(a job of another team)"

// redactJobIDs hides, in text shown to c, the ids of jobs of teams c may
// not see. An id the store cannot place is hidden too.
func (a *API) redactJobIDs(ctx context.Context, c Caller, text string) string {
	if text == "" || c.Fleet() || a.openReads() {
		return text
	}
	return jobIDPattern.ReplaceAllStringFunc(text, func(id string) string {
		if j, err := a.store.GetJob(ctx, id); err == nil && a.sees(c, j.Team) {
			return id
		}
		return hiddenJob
	})
}

// redactView hides other teams' job ids in what v says about its waits and
// failures.
func (a *API) redactView(ctx context.Context, c Caller, v *api.Job) {
	hide := func(s *string) {
		if s != nil {
			*s = a.redactJobIDs(ctx, c, *s)
		}
	}
	hide(&v.WaitingDetail)
	hide(v.Error)
	for i := range v.Attempts {
		hide(v.Attempts[i].Error)
	}
	for i := range v.DependsOn {
		hide(&v.DependsOn[i].JobID)
	}
}
