package placement

import (
	"context"
	"slices"

	"github.com/simpletuner/simpletuner-orchestration/internal/lifecycle"
	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
	"github.com/simpletuner/simpletuner-orchestration/internal/store"
)

// Reader is what the pool reads of the store.
type Reader interface {
	GetWorkers(ctx context.Context, ids []string, statuses ...protocol.WorkerStatus) ([]store.Worker, error)
	GPULeases(ctx context.Context, workerID string) ([]store.GPULease, error)
}

// Pool is the workers a pass may place jobs on, read from the store as
// placement needs them, once per pass and a page at a time: a job that
// finds a perfect fit early costs one small query however many workers are
// connected, and only a job with no room anywhere reads them all.
//
// Only an idle or partial worker can have room, so the pages hold those
// alone (the store filters by status); the busy ones are read only for a
// reservation, which weighs every worker that could ever run its job.
type Pool struct {
	ctx     context.Context
	store   Reader
	all     []string // every worker of the pool, in its order
	next    int      // the position of the first not read yet
	later   []int    // positions of the workers not idle or partial when read
	pages   int
	fetched []*Candidate // read and not yet offered
	read    []*Candidate // offered
}

// pageSize is the most workers the pool reads from the store at once.
const pageSize = 32

// firstPages are the sizes of a pass's pages, the last repeated: the first
// worker read usually fits, so the first page is small.
var firstPages = []int{4, 16, pageSize}

// roomy are the statuses in which a worker may have room (lifecycle.CanClaim).
var roomy = []protocol.WorkerStatus{protocol.WorkerIdle, protocol.WorkerPartial}

// NewPool is a pool of the workers ids, in the order placement breaks ties
// in (the order their streams connected).
func NewPool(ctx context.Context, r Reader, ids []string) *Pool {
	return &Pool{ctx: ctx, store: r, all: ids}
}

// AnyRoom reports whether a worker read so far could still take a job.
func (p *Pool) AnyRoom() bool { return slices.ContainsFunc(p.read, (*Candidate).HasRoom) }

// more returns the next idle or partial worker, reading them from the store
// a page at a time (4, 16, then pageSize workers: the first worker read
// usually fits); nil when every one has been read.
func (p *Pool) more() *Candidate {
	for len(p.fetched) == 0 && p.next < len(p.all) {
		n := min(firstPages[min(p.pages, len(firstPages)-1)], len(p.all)-p.next)
		positions := make([]int, n)
		for i := range positions {
			positions[i] = p.next + i
		}
		p.next += n
		p.pages++
		var missed []int
		p.fetched, missed = p.candidates(positions, roomy...)
		p.later = append(p.later, missed...)
	}
	if len(p.fetched) == 0 {
		return nil
	}
	c := p.fetched[0]
	p.fetched = p.fetched[1:]
	p.read = append(p.read, c)
	return c
}

// readAll reads every worker of the pool not read yet: the busy ones too.
func (p *Pool) readAll() {
	for p.more() != nil {
	}
	for positions := range slices.Chunk(p.later, pageSize) {
		got, _ := p.candidates(positions)
		p.read = append(p.read, got...)
	}
	p.later = nil
	// Ties among the workers read go to the first in the pool, however late
	// each was read.
	slices.SortStableFunc(p.read, func(a, b *Candidate) int { return a.pos - b.pos })
}

// candidates reads the workers at positions (those in one of statuses, if
// any are given) and returns, in the pool's order, the ones taking work,
// and the positions of those the store did not return.
func (p *Pool) candidates(positions []int, statuses ...protocol.WorkerStatus) (out []*Candidate, missed []int) {
	ids := make([]string, len(positions))
	for i, pos := range positions {
		ids[i] = p.all[pos]
	}
	ws, err := p.store.GetWorkers(p.ctx, ids, statuses...)
	if err != nil {
		return nil, positions
	}
	byID := make(map[string]store.Worker, len(ws))
	for _, w := range ws {
		byID[w.ID] = w
	}
	for i, id := range ids {
		w, ok := byID[id]
		if !ok {
			missed = append(missed, positions[i])
			continue
		}
		// A busy worker has no room now but may be reserved for a job.
		if !lifecycle.Working(w.Status) {
			continue
		}
		var leased []store.GPULease
		if w.GPUsUsed > 0 {
			if leased, err = p.store.GPULeases(p.ctx, w.ID); err != nil {
				continue
			}
		}
		c := NewCandidate(w, leased)
		c.pos = positions[i]
		out = append(out, c)
	}
	return out, missed
}
