package orchestrator

import (
	"encoding/base64"
	"net/http"
	"strconv"
	"strings"

	"github.com/julienschmidt/httprouter"

	"github.com/simpletuner/simpletuner-orchestration/internal/auth"
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
	return "", invalid("query parameter \"order\" must be newest or oldest; got %q", v)
}

// jobListQuery is what GET /api/queue was asked for.
type jobListQuery struct {
	filter store.JobFilter
	order  string
	// waiting: explain each queued job's wait, at the cost of reading every
	// worker once for the page.
	waiting bool
}

func parseJobList(r *http.Request) (jobListQuery, error) {
	q := r.URL.Query()
	var out jobListQuery
	f := &out.filter
	if st := strings.ToLower(q.Get("status")); st != "" {
		switch st {
		case "pending":
			f.Statuses = []protocol.JobStatus{protocol.JobQueued}
		case "active":
			f.Statuses = protocol.ActiveJobStatuses()
		default:
			if !protocol.JobStatus(st).Valid() {
				return out, invalid("query parameter \"status\" must be a job status (queued, dispatched, running, canceling, completed, failed, cancelled), pending or active; got %q", st)
			}
			f.Statuses = []protocol.JobStatus{protocol.JobStatus(st)}
		}
	}
	if w := q.Get("worker_id"); w != "" {
		if len(w) > 64 {
			return out, invalid("query parameter \"worker_id\" is too long (64 characters at most)")
		}
		f.WorkerID = w
	}
	var err error
	if out.order, err = parseOrder(q.Get("order")); err != nil {
		return out, err
	}
	if w := q.Get("waiting"); w != "" {
		if out.waiting, err = strconv.ParseBool(w); err != nil {
			return out, invalid("query parameter \"waiting\" must be 1 or 0; got %q", w)
		}
	}
	if f.Limit, f.Offset, err = page(r, 50, 200); err != nil {
		return out, err
	}
	if c := q.Get("cursor"); c != "" {
		order, seq, ok := decodeCursor(c)
		if !ok {
			return out, invalid("query parameter \"cursor\" is not a cursor this orchestrator gave out; send back the \"next\" of the previous page")
		}
		if q.Get("order") != "" && order != out.order {
			return out, invalid("query parameter \"cursor\" continues a list in %s order, but \"order\" asks for %s", order, out.order)
		}
		if f.Offset > 0 {
			return out, invalid("give either \"cursor\" or \"offset\", not both")
		}
		out.order, f.AfterSeq = order, seq
	}
	f.Newest = out.order == newestFirst
	return out, nil
}

// listJobs answers GET /api/queue: a page of jobs, newest first unless asked
// otherwise, the cursor of the next page, and the counts.
func (s *Server) listJobs(w http.ResponseWriter, r *http.Request, _ httprouter.Params, _ auth.Principal) error {
	lq, err := parseJobList(r)
	if err != nil {
		return err
	}
	f := lq.filter
	limit := f.Limit
	f.Limit++ // one more tells whether a next page exists
	jobs, total, err := s.store.ListJobs(r.Context(), f)
	if err != nil {
		return err
	}
	counts, err := s.store.CountJobs(r.Context())
	if err != nil {
		return err
	}
	reply := map[string]any{
		"total_pending": counts[protocol.JobQueued],
		"total_running": counts[protocol.JobDispatched] + counts[protocol.JobRunning] + counts[protocol.JobCanceling],
		"order":         lq.order,
	}
	if len(jobs) > limit {
		jobs = jobs[:limit]
		reply["next"] = encodeCursor(lq.order, jobs[len(jobs)-1].Seq)
	}
	// Counting one worker's jobs would read its whole history: no total then.
	if total >= 0 {
		reply["total"] = total
	}
	entries := make([]jobView, 0, len(jobs))
	var facts []workerFacts // read for the first queued job, then shared
	factsRead := false
	for _, j := range jobs {
		v := newJobView(j)
		if lq.waiting && j.Status == protocol.JobQueued {
			if !factsRead {
				if facts, err = s.workerFacts(r.Context()); err != nil {
					return err
				}
				factsRead = true
			}
			if v.WaitingReason, v.WaitingDetail, err = s.explainWait(r.Context(), j, facts); err != nil {
				return err
			}
		}
		entries = append(entries, v)
	}
	reply["entries"] = entries
	writeJSON(w, http.StatusOK, reply)
	return nil
}
