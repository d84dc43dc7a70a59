package scheduler

import (
	"context"

	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator/fairshare"
	"github.com/simpletuner/simpletuner-orchestration/internal/store"
)

// passJobs is how many queued jobs, in priority order, one pass places.
const passJobs = 200

// queue is the queue as a pass reads it, in claim order.
type queue interface {
	next() (store.QueuedJob, bool)
	// firstPage is the jobs read first (the head of the queue).
	firstPage() []store.QueuedJob
}

// queueStore is what reading the queue takes of the store.
type queueStore interface {
	ListQueued(ctx context.Context, after *store.QueuedJob, limit int) ([]store.QueuedJob, error)
	ListQueuedOfTeam(ctx context.Context, team string, after *store.QueuedJob, limit int) ([]store.QueuedJob, error)
}

// mergedQueue merges the teams' queues.
type mergedQueue struct {
	st      *fairshare.Standing
	readers []*queueReader
	heads   []*store.QueuedJob // each reader's next job; nil when not read
	taken   int
}

// readHeads reads the next job of each team whose head was taken.
func (m *mergedQueue) readHeads() {
	for i, r := range m.readers {
		if m.heads[i] == nil {
			if j, ok := r.next(); ok {
				m.heads[i] = &j
			}
		}
	}
}

func (m *mergedQueue) next() (store.QueuedJob, bool) {
	if m.taken >= passJobs {
		return store.QueuedJob{}, false
	}
	m.readHeads()
	best := -1
	for i := range m.readers {
		if m.heads[i] != nil && (best < 0 || m.st.Before(*m.heads[i], *m.heads[best])) {
			best = i
		}
	}
	if best < 0 {
		return store.QueuedJob{}, false
	}
	j := *m.heads[best]
	m.heads[best] = nil
	m.taken++
	return j, true
}

// waitingTeams names the teams whose queue has jobs.
func (m *mergedQueue) waitingTeams() []string {
	var out []string
	for _, r := range m.readers {
		if len(r.first) > 0 {
			out = append(out, r.team)
		}
	}
	return out
}

func (m *mergedQueue) firstPage() []store.QueuedJob {
	var out []store.QueuedJob
	for _, r := range m.readers {
		out = append(out, r.first...)
	}
	return out
}

// queueReader reads the head of the queue in claim order a page at a time
// (16 jobs, then 64, then the rest of passJobs): a pass usually places a
// few jobs on the workers that just freed up, and reading all passJobs for
// them was a large part of its cost.
type queueReader struct {
	st        queueStore
	noteStore func(error)
	ctx       context.Context
	// team, with byTeam, reads that team's jobs alone.
	team   string
	byTeam bool
	first  []store.QueuedJob // the first page
	page   []store.QueuedJob // read and not yet taken
	last   *store.QueuedJob  // the last job read
	read   int
	end    bool
}

// next returns the next queued job; false at the end of the queue, after
// passJobs jobs, or when the store failed.
func (q *queueReader) next() (store.QueuedJob, bool) {
	if len(q.page) == 0 {
		if q.end || q.read >= passJobs {
			return store.QueuedJob{}, false
		}
		n := min(16<<(2*min(q.read/16, 2)), passJobs-q.read)
		var page []store.QueuedJob
		var err error
		if q.byTeam {
			page, err = q.st.ListQueuedOfTeam(q.ctx, q.team, q.last, n)
		} else {
			page, err = q.st.ListQueued(q.ctx, q.last, n)
		}
		q.noteStore(err)
		if err != nil || len(page) == 0 {
			q.end = true
			return store.QueuedJob{}, false
		}
		if q.first == nil {
			q.first = page
		}
		q.end = len(page) < n
		q.read += len(page)
		q.last = &page[len(page)-1]
		q.page = page
	}
	j := q.page[0]
	q.page = q.page[1:]
	return j, true
}

func (q *queueReader) firstPage() []store.QueuedJob { return q.first }
