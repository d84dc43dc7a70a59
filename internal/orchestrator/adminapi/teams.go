package adminapi

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/julienschmidt/httprouter"

	"github.com/simpletuner/simpletuner-orchestration/internal/api"
	"github.com/simpletuner/simpletuner-orchestration/internal/auth"
	"github.com/simpletuner/simpletuner-orchestration/internal/config"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator/fairshare"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator/web"
	"github.com/simpletuner/simpletuner-orchestration/internal/store"
)

// teamName is how a team is shown: "" (a token or job from before teams)
// is the default team.
func teamName(t string) string {
	if t == "" {
		return "default"
	}
	return t
}

// teamNames lists the configured teams, for error messages.
func (a *API) teamNames() string {
	var names []string
	for _, t := range a.options().Teams.Teams {
		names = append(names, t.Name)
	}
	return strings.Join(names, ", ")
}

// tokenTeam checks the team a new token is given: "" (the default team) or
// a configured team.
func (a *API) tokenTeam(team string) (string, error) {
	team = strings.TrimSpace(team)
	if team == "" || team == "default" {
		return "", nil
	}
	if !a.options().Teams.Known(team) {
		return "", web.Invalid("field \"team\": unknown team %q; the teams are %s (set them in [[teams]] of orchestratord.toml)", team, a.teamNames())
	}
	return team, nil
}

// submitTeam is the team a job from c is counted against, checked against
// the job: the team must still be configured, and the job must fit its
// GPU limit.
func (a *API) submitTeam(c Caller, j store.Job) (fairshare.Team, error) {
	t := a.options().Teams.Team(c.TeamOrDefault())
	if !t.Configured {
		return t, web.Invalid("this token's team %q is not in [[teams]] of orchestratord.toml any more; the teams are %s", t.Name, a.teamNames())
	}
	if t.MaxGPUs > 0 && j.GPUCount > t.MaxGPUs {
		return t, web.Invalid("field \"gpu_count\": the job asks for %d GPUs; team %q may hold at most %d at once (max_gpus)", j.GPUCount, t.Name, t.MaxGPUs)
	}
	return t, nil
}

// priorityLimit is the highest priority c may give a job of team t, and
// where that limit comes from, for a refusal: a token with every scope
// ("*") may give any; a token's own grant comes before its team's
// max_priority.
func priorityLimit(c Caller, t fairshare.Team) (limit int, from string) {
	switch {
	case c.Has(auth.ScopeAll):
		return config.HighestPriority, "the highest there is"
	case c.MaxPriority != nil:
		return *c.MaxPriority, "this token's max_priority, granted when it was created"
	}
	return t.MaxPriority, fmt.Sprintf("the max_priority of team %q in [[teams]] of orchestratord.toml", t.Name)
}

// jobPriority gives j the priority asked for, refused above what c was
// granted; or, when none is asked for, the default priority (the limit,
// where that is lower).
func jobPriority(c Caller, t fairshare.Team, asked *int, j *store.Job) error {
	limit, from := priorityLimit(c, t)
	if asked == nil {
		j.Priority = min(defaultPriority, limit)
		return nil
	}
	if *asked > limit {
		return web.Invalid("field \"priority\": %d is above %d, the highest priority this token may give a job (%s); "+
			"an admin grants more with max_priority in [[teams]] or simpletunerctl tokens create --max-priority", *asked, limit, from)
	}
	j.Priority = *asked
	return nil
}

// CheckTokenMaxPriority checks the max_priority asked for a new token: a
// job's priority, and not on a token with every scope, which may give any
// priority (and create tokens of any grant).
func CheckTokenMaxPriority(scopes []string, p *int) error {
	if p == nil {
		return nil
	}
	if *p < config.LowestPriority || *p > config.HighestPriority {
		return web.Invalid("field \"max_priority\" must be from %d to %d (a job's priorities); got %d", config.LowestPriority, config.HighestPriority, *p)
	}
	if (auth.Principal{Scopes: scopes}).Has(auth.ScopeAll) {
		return web.Invalid("field \"max_priority\": a token with scope \"*\" may give any priority; leave max_priority out or grant narrower scopes")
	}
	return nil
}

// teamLimitWait explains a queued job held back by its team's max_gpus, or
// returns "" when the limit does not hold it.
func (a *API) teamLimitWait(ctx context.Context, j store.Job) (string, error) {
	t := a.options().Teams.Team(teamName(j.Team))
	if t.MaxGPUs == 0 {
		return "", nil
	}
	active, err := a.store.ListActiveAttempts(ctx)
	if err != nil {
		return "", err
	}
	held := 0
	for _, at := range active {
		if at.Team == t.Name {
			held += at.GPUs
		}
	}
	if held+max(j.GPUCount, 1) <= t.MaxGPUs {
		return "", nil
	}
	detail := fmt.Sprintf("team %q holds %d GPUs and may hold at most %d (max_gpus)", t.Name, held, t.MaxGPUs)
	if t.Borrow {
		detail += "; it borrows GPUs no other team's job waits for"
	}
	return detail, nil
}

func usageQuery(_ http.ResponseWriter, r *http.Request, _ httprouter.Params) (api.UsageQuery, error) {
	q := r.URL.Query()
	return api.UsageQuery{From: q.Get("from"), To: q.Get("to")}, nil
}

// maxUsageDays bounds the days one usage request covers.
const maxUsageDays = 366

// Usage answers GET /api/admin/usage: each team's share, limits, what it
// holds now, its decayed usage and factor, and its GPU-hours per day.
func (a *API) Usage(ctx context.Context, q api.UsageQuery) (api.Usage, error) {
	c, err := authorize(ctx, auth.ScopeQueueView)
	if err != nil {
		return api.Usage{}, err
	}
	now := time.Now().UTC()
	from, to, err := usageDays(q, now)
	if err != nil {
		return api.Usage{}, err
	}
	names, err := a.store.TeamsWithJobs(ctx)
	if err != nil {
		return api.Usage{}, err
	}
	p := a.options().Teams.With(names)
	// The factor weighs ten half-lives of history; the days shown may reach
	// further back.
	since := now.Add(-min(10*p.HalfLife, 400*24*time.Hour))
	if from.Before(since) {
		since = from
	}
	days, err := a.store.TeamUsage(ctx, since.Format(store.DayFormat))
	if err != nil {
		return api.Usage{}, err
	}
	active, err := a.store.ListActiveAttempts(ctx)
	if err != nil {
		return api.Usage{}, err
	}
	fleet, err := store.FleetGPUs(ctx, a.store)
	if err != nil {
		return api.Usage{}, err
	}
	st := fairshare.NewStanding(p, days, active, fleet, now)
	out := api.Usage{HalfLifeSeconds: p.HalfLife.Seconds(), FleetGPUs: fleet, From: from.Format(store.DayFormat),
		To: to.Format(store.DayFormat), Preemption: p.Preemption}
	perDay := usageByDay(days, active, from, to, now)
	for _, t := range st.Teams() {
		if !a.sees(c, t.Name) {
			continue // another team's standing is not the caller's to read
		}
		queued, err := a.store.CountQueuedOfTeam(ctx, t.Name)
		if err != nil {
			return api.Usage{}, err
		}
		tu := api.TeamUsage{Team: t.Name, Share: t.Share, ShareFraction: t.ShareFraction, MaxGPUs: t.MaxGPUs,
			MaxQueued: t.MaxQueued, Borrow: t.Borrow, Configured: t.Configured, RunningJobs: t.RunningJobs,
			RunningGPUs: t.RunningGPUs, QueuedJobs: queued, DecayedGPUHours: t.DecayedGPUSeconds / 3600,
			UsageFraction: t.UsageFraction, FairShare: t.Factor, Days: []api.UsageDay{}}
		for d := from; !d.After(to); d = d.AddDate(0, 0, 1) {
			h := perDay[t.Name][d.Format(store.DayFormat)] / 3600
			tu.Days = append(tu.Days, api.UsageDay{Day: d.Format(store.DayFormat), GPUHours: h})
			tu.GPUHours += h
		}
		out.Teams = append(out.Teams, tu)
	}
	return out, nil
}

// usageDays reads the query's days: to defaults to today, from to six days
// before to.
func usageDays(q api.UsageQuery, now time.Time) (from, to time.Time, err error) {
	day := func(name, v string, def time.Time) (time.Time, error) {
		if v == "" {
			return def, nil
		}
		d, err := time.Parse(store.DayFormat, v)
		if err != nil {
			return d, web.Invalid("query parameter %q must be a day as YYYY-MM-DD; got %q", name, v)
		}
		return d, nil
	}
	today := now.Truncate(24 * time.Hour)
	if to, err = day("to", q.To, today); err != nil {
		return
	}
	if from, err = day("from", q.From, to.AddDate(0, 0, -6)); err != nil {
		return
	}
	switch {
	case from.After(to):
		err = web.Invalid("query parameter \"from\" (%s) is after \"to\" (%s)", q.From, to.Format(store.DayFormat))
	case to.Sub(from) > maxUsageDays*24*time.Hour:
		err = web.Invalid("at most %d days at once; got %s to %s", maxUsageDays, from.Format(store.DayFormat), to.Format(store.DayFormat))
	}
	return
}

// usageByDay sums GPU-seconds by team and day in [from, to]: the ended
// attempts', and the running ones' up to now.
func usageByDay(days []store.TeamDay, active []store.ActiveAttempt, from, to, now time.Time) map[string]map[string]float64 {
	out := map[string]map[string]float64{}
	add := func(team, day string, secs float64) {
		if d, err := time.Parse(store.DayFormat, day); err != nil || d.Before(from) || d.After(to) {
			return
		}
		if out[team] == nil {
			out[team] = map[string]float64{}
		}
		out[team][day] += secs
	}
	for _, d := range days {
		add(d.Team, d.Day, d.GPUSeconds)
	}
	for _, at := range active {
		if at.StartedAt == nil || !now.After(*at.StartedAt) {
			continue
		}
		for d := at.StartedAt.UTC(); d.Before(now); {
			next := d.Truncate(24*time.Hour).AddDate(0, 0, 1)
			end := next
			if now.Before(end) {
				end = now
			}
			add(at.Team, d.Format(store.DayFormat), float64(at.GPUs)*end.Sub(d).Seconds())
			d = next
		}
	}
	return out
}
