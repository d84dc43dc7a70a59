package adminapi

import (
	"context"
	"sync"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
)

// The stats' "finished in the last 24 hours" counts. Counting the window
// outright reads every job that ended in it: tens of thousands of index
// entries on a busy fleet, tens of milliseconds on every stats request. So
// the window is counted in full once a minute at most, up to a little before
// that moment, and each request adds what ended since then and takes off
// what has slid out of the window since: two short index ranges, the same
// exact answer.

// recentRecount is how old the full count may get before a request redoes it.
const recentRecount = time.Minute

// recentLag keeps the full count's upper end this far behind the clock, so
// that a job whose end time was taken just before the count but committed
// just after it is counted by the requests' "since then" range instead of
// being missed by both.
const recentLag = 30 * time.Second

type recentEnds struct {
	mu     sync.Mutex
	since  time.Time // the full count covers [since, until)
	until  time.Time
	at     time.Time // when it was taken
	counts map[protocol.JobStatus]int
}

// recentEndCounts counts, by status, the jobs that ended in the last
// recentWindow.
func (a *API) recentEndCounts(ctx context.Context) (map[protocol.JobStatus]int, error) {
	now := time.Now()
	since := now.Add(-recentWindow)
	full, err := a.recent.fullCount(ctx, a.store, now)
	if err != nil {
		return nil, err
	}
	added, err := a.store.CountJobsEndedBetween(ctx, full.until, time.Time{})
	if err != nil {
		return nil, err
	}
	out := map[protocol.JobStatus]int{}
	for st, n := range full.counts {
		out[st] += n
	}
	for st, n := range added {
		out[st] += n
	}
	if since.After(full.since) {
		gone, err := a.store.CountJobsEndedBetween(ctx, full.since, since)
		if err != nil {
			return nil, err
		}
		for st, n := range gone {
			out[st] -= n
		}
	}
	return out, nil
}

// fullCount returns the full count, redoing it first when it is too old
// for a window that ends at now (one request redoes it; others wait).
func (r *recentEnds) fullCount(ctx context.Context, st JobStore, now time.Time) (recentEnds, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	since := now.Add(-recentWindow)
	if r.counts == nil || now.Sub(r.at) > recentRecount || since.Before(r.since) || since.After(r.until) {
		until := now.Add(-recentLag)
		counts, err := st.CountJobsEndedBetween(ctx, since, until)
		if err != nil {
			return recentEnds{}, err
		}
		r.since, r.until, r.at, r.counts = since, until, now, counts
	}
	return recentEnds{since: r.since, until: r.until, at: r.at, counts: r.counts}, nil
}
