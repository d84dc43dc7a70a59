package adminapi

import (
	"context"
	"encoding/base64"
	"net/http"
	"strconv"
	"strings"

	"github.com/julienschmidt/httprouter"

	"github.com/simpletuner/simpletuner-orchestration/internal/api"
	"github.com/simpletuner/simpletuner-orchestration/internal/auth"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator/web"
	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
	"github.com/simpletuner/simpletuner-orchestration/internal/store"
)

// Job lists are read a page at a time from a keyset cursor: a page costs the
// same on the millionth job as on the first. The cursor is opaque to clients
// (they send back the reply's "next" as ?cursor=); inside it is the list's
// order and the Seq of the last job of the page. Offsets still work, for
// clients written against upstream, but cost what they skip.

// Orders a job list can take; newest first is the default.
const (
	newestFirst = "newest_first"
	oldestFirst = "oldest_first"
)

// cursorVersion starts every cursor, so that a later format can tell its own.
const cursorVersion = "1"

func encodeCursor(order string, seq int64) string {
	o := "n"
	if order == oldestFirst {
		o = "o"
	}
	return base64.RawURLEncoding.EncodeToString([]byte(cursorVersion + "." + o + "." + strconv.FormatInt(seq, 10)))
}

// decodeCursor returns the order and Seq a cursor holds.
func decodeCursor(c string) (order string, seq int64, ok bool) {
	raw, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil {
		return "", 0, false
	}
	parts := strings.Split(string(raw), ".")
	if len(parts) != 3 || parts[0] != cursorVersion {
		return "", 0, false
	}
	switch parts[1] {
	case "n":
		order = newestFirst
	case "o":
		order = oldestFirst
	default:
		return "", 0, false
	}
	seq, err = strconv.ParseInt(parts[2], 10, 64)
	if err != nil || seq <= 0 {
		return "", 0, false
	}
	return order, seq, true
}

// parseOrder reads ?order= (newest, oldest; the reply's spellings too).
func parseOrder(v string) (string, error) {
	switch strings.ToLower(v) {
	case "", "newest", "newest_first", "desc":
		return newestFirst, nil
	case "oldest", "oldest_first", "asc":
		return oldestFirst, nil
	}
	return "", web.Invalid("query parameter \"order\" must be newest or oldest; got %q", v)
}

// jobListQuery is a job list's store filter, order and whether to explain
// the waits (at the cost of reading every worker once for the page).
type jobListQuery struct {
	filter  store.JobFilter
	order   string
	waiting bool
}

// jobsQuery reads GET /api/queue's query; the method checks what it says.
func jobsQuery(_ http.ResponseWriter, r *http.Request, _ httprouter.Params) (api.JobsQuery, error) {
	q := r.URL.Query()
	out := api.JobsQuery{Status: q.Get("status"), WorkerID: q.Get("worker_id"), Order: q.Get("order"), Cursor: q.Get("cursor")}
	if w := q.Get("waiting"); w != "" {
		var err error
		if out.Waiting, err = strconv.ParseBool(w); err != nil {
			return out, web.Invalid("query parameter \"waiting\" must be 1 or 0; got %q", w)
		}
	}
	var err error
	out.Limit, out.Offset, err = page(r, jobsPageDefault, jobsPageMax)
	return out, err
}

// A page of the jobs list: the default and the most a query may ask for, the
// same over HTTP and for in-process callers.
const jobsPageDefault, jobsPageMax = 50, 200

func parseJobList(in api.JobsQuery) (jobListQuery, error) {
	out := jobListQuery{waiting: in.Waiting}
	f := &out.filter
	if st := strings.ToLower(in.Status); st != "" {
		switch st {
		case "pending":
			f.Statuses = []protocol.JobStatus{protocol.JobQueued}
		case "active":
			f.Statuses = protocol.ActiveJobStatuses()
		case "blocked": // SimpleTuner's name for a job waiting for approval
			f.Statuses = []protocol.JobStatus{protocol.JobPendingApproval}
		default:
			if !protocol.JobStatus(st).Valid() {
				return out, web.Invalid("query parameter \"status\" must be a job status (pending_approval, waiting, queued, dispatched, running, canceling, completed, failed, cancelled), pending, active or blocked; got %q", st)
			}
			f.Statuses = []protocol.JobStatus{protocol.JobStatus(st)}
		}
	}
	if w := in.WorkerID; w != "" {
		if len(w) > 64 {
			return out, web.Invalid("query parameter \"worker_id\" is too long (64 characters at most)")
		}
		f.WorkerID = w
	}
	var err error
	if out.order, err = parseOrder(in.Order); err != nil {
		return out, err
	}
	f.Limit, f.Offset = in.Limit, in.Offset
	if f.Limit <= 0 {
		f.Limit = jobsPageDefault
	}
	if f.Limit > jobsPageMax || f.Offset < 0 {
		return out, web.Invalid("query parameter \"limit\" must be an integer from 1 to %d", jobsPageMax)
	}
	if c := in.Cursor; c != "" {
		order, seq, ok := decodeCursor(c)
		if !ok {
			return out, web.Invalid("query parameter \"cursor\" is not a cursor this orchestrator gave out; send back the \"next\" of the previous page")
		}
		if in.Order != "" && order != out.order {
			return out, web.Invalid("query parameter \"cursor\" continues a list in %s order, but \"order\" asks for %s", order, out.order)
		}
		if f.Offset > 0 {
			return out, web.Invalid("give either \"cursor\" or \"offset\", not both")
		}
		out.order, f.AfterSeq = order, seq
	}
	f.Newest = out.order == newestFirst
	return out, nil
}

// Jobs is a page of jobs, newest first unless asked otherwise, the cursor
// of the next page, and the counts.
func (a *API) Jobs(ctx context.Context, q api.JobsQuery) (api.JobList, error) {
	c, err := authorize(ctx, auth.ScopeQueueView)
	if err != nil {
		return api.JobList{}, err
	}
	lq, err := parseJobList(q)
	if err != nil {
		return api.JobList{}, err
	}
	f := lq.filter
	f.Teams = a.visibleTeams(c)
	limit := f.Limit
	f.Limit++ // one more tells whether a next page exists
	jobs, total, err := a.store.ListJobs(ctx, f)
	if err != nil {
		return api.JobList{}, err
	}
	counts, err := a.store.CountJobs(ctx)
	if err != nil {
		return api.JobList{}, err
	}
	reply := api.JobList{
		TotalPending: counts[protocol.JobQueued],
		TotalRunning: counts[protocol.JobDispatched] + counts[protocol.JobRunning] + counts[protocol.JobCanceling],
		Order:        lq.order,
	}
	if len(jobs) > limit {
		jobs = jobs[:limit]
		next := encodeCursor(lq.order, jobs[len(jobs)-1].Seq)
		reply.Next = &next
	}
	// Counting one worker's jobs would read its whole history: no total then.
	if total >= 0 {
		reply.Total = &total
	}
	reply.Entries = make([]api.Job, 0, len(jobs))
	var facts []workerFacts // read for the first queued job, then shared
	factsRead := false
	for _, j := range jobs {
		v := newJobView(j)
		if lq.waiting && j.Status == protocol.JobWaiting {
			deps, _, err := a.store.Dependencies(ctx, j.ID)
			if err != nil {
				return api.JobList{}, err
			}
			v.WaitingReason, v.WaitingDetail = dependencyWait(deps)
		}
		if lq.waiting && j.Status == protocol.JobQueued {
			if !factsRead {
				if facts, err = a.workerFacts(ctx); err != nil {
					return api.JobList{}, err
				}
				factsRead = true
			}
			if v.WaitingReason, v.WaitingDetail, err = a.explainWait(ctx, j, facts); err != nil {
				return api.JobList{}, err
			}
		}
		a.redactView(ctx, c, &v)
		reply.Entries = append(reply.Entries, v)
	}
	return reply, nil
}
