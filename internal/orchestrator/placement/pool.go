package placement

import (
	"context"
	"slices"

	"github.com/simpletuner/simpletuner-orchestration/internal/lifecycle"
	"github.com/simpletuner/simpletuner-orchestration/internal/store"
)

// Reader is what the pool reads of the store.
type Reader interface {
	GetWorkers(ctx context.Context, ids []string) ([]store.Worker, error)
	GPULeases(ctx context.Context, workerID string) ([]store.GPULease, error)
}

// Pool is the workers a pass may place jobs on, read from the store as
// placement needs them, once per pass and pageSize at a time: a job that
// finds a perfect fit early costs one query however many workers are
// connected, and only a job with no room anywhere reads them all.
type Pool struct {
	ctx     context.Context
	store   Reader
	ids     []string     // not read yet
	fetched []*Candidate // read and not yet offered
	read    []*Candidate // offered
}

// pageSize is how many workers the pool reads from the store at once.
const pageSize = 32

// NewPool is a pool of the workers ids, in the order placement breaks ties
// in (the order their streams connected).
func NewPool(ctx context.Context, r Reader, ids []string) *Pool {
	return &Pool{ctx: ctx, store: r, ids: ids}
}

// AnyRoom reports whether a worker read so far could still take a job.
func (p *Pool) AnyRoom() bool { return slices.ContainsFunc(p.read, (*Candidate).HasRoom) }

// more returns the next worker that is online, reading them from the store
// pageSize at a time; nil when every one has been read.
func (p *Pool) more() *Candidate {
	for len(p.fetched) == 0 && len(p.ids) > 0 {
		ids := p.ids[:min(pageSize, len(p.ids))]
		p.ids = p.ids[len(ids):]
		ws, err := p.store.GetWorkers(p.ctx, ids)
		if err != nil {
			continue
		}
		byID := make(map[string]store.Worker, len(ws))
		for _, w := range ws {
			byID[w.ID] = w
		}
		for _, id := range ids { // in the pool's order, as ties expect
			// A busy worker has no room now but may be reserved for a job.
			if w, ok := byID[id]; ok && lifecycle.Working(w.Status) {
				var leased []store.GPULease
				if w.GPUsUsed > 0 {
					if leased, err = p.store.GPULeases(p.ctx, w.ID); err != nil {
						continue
					}
				}
				p.fetched = append(p.fetched, NewCandidate(w, leased))
			}
		}
	}
	if len(p.fetched) == 0 {
		return nil
	}
	c := p.fetched[0]
	p.fetched = p.fetched[1:]
	p.read = append(p.read, c)
	return c
}
