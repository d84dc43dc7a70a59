package sqlstore

import (
	"context"
	"sync"
)

// groupCommit runs the write transactions that queue up behind each other as
// one transaction with one commit, on an engine with a single writer
// (SQLite). Each keeps its own outcome: it runs inside a savepoint, and one
// that fails is rolled back to it while the others commit. A commit costs
// more than most of the transactions it ends (the pages each one touched are
// written to the log again), so under load one commit for several saves more
// than all the rest of their work.
//
// There is no goroutine of its own: a writer that finds no batch running
// runs the next one, which holds its own write, and then hands the turn to
// the writer now first in the queue; the others wait for their outcome. A
// writer waits for the batches ahead of it and its own, never for later ones.
type groupCommit struct {
	s *Store

	mu      sync.Mutex
	queue   []*groupWrite
	running bool // a writer is running a batch or has been given the turn
}

// groupWrite is one write transaction waiting for its batch.
type groupWrite struct {
	ctx  context.Context
	fn   func(c conn) error
	err  error
	done chan struct{} // closed once err is its outcome
	turn chan struct{} // closed when this writer is to run the next batch
}

// maxGroup bounds a batch: a long one holds back the first of its writers.
const maxGroup = 64

func (g *groupCommit) write(ctx context.Context, fn func(c conn) error) error {
	w := &groupWrite{ctx: ctx, fn: fn, done: make(chan struct{}), turn: make(chan struct{})}
	g.mu.Lock()
	g.queue = append(g.queue, w)
	lead := !g.running
	g.running = true
	g.mu.Unlock()
	if !lead {
		select {
		case <-w.done:
			return w.err
		case <-w.turn: // first in the queue: the next batch holds w
		}
	}
	g.next()
	return w.err
}

// next runs the batch at the head of the queue and passes the turn on.
func (g *groupCommit) next() {
	g.mu.Lock()
	n := min(len(g.queue), maxGroup)
	batch := g.queue[:n:n]
	g.queue = g.queue[n:]
	g.mu.Unlock()
	g.run(batch)
	for _, w := range batch {
		close(w.done)
	}
	g.mu.Lock()
	if len(g.queue) > 0 {
		close(g.queue[0].turn)
	} else {
		g.running = false
	}
	g.mu.Unlock()
}

// run commits one batch. A writer whose context ended before its turn does
// not run. Statements run detached from the writers' contexts: a cancelled
// request must not interrupt a statement, which could roll back the whole
// batch.
func (g *groupCommit) run(batch []*groupWrite) {
	live := batch[:0:0]
	for _, w := range batch {
		if w.err = w.ctx.Err(); w.err == nil {
			live = append(live, w)
		}
	}
	switch len(live) {
	case 0:
		return
	case 1: // no savepoint needed
		g.alone(live[0])
		return
	}
	err := g.s.writeTx(context.Background(), true, func(c conn) error {
		for _, w := range live {
			w.err = inSavepoint(c, w.fn)
			if isTxError(w.err) {
				return w.err
			}
		}
		return nil
	})
	if err == nil {
		for _, w := range live {
			w.err = g.s.mapErr(w.err)
		}
		return
	}
	// The transaction failed: nothing of the batch is stored. Each writer
	// that did not fail on its own gets a transaction of its own, so one
	// writer's trouble (a full disk met by a large insert) is not every
	// writer's.
	for _, w := range live {
		if w.err == nil || isTxError(w.err) {
			g.alone(w)
		}
	}
}

// alone runs w in a transaction of its own, to its end once started.
func (g *groupCommit) alone(w *groupWrite) {
	w.err = g.s.writeTx(context.WithoutCancel(w.ctx), true, w.fn)
}

// inSavepoint runs fn so that its failure undoes only its own changes.
func inSavepoint(c conn, fn func(c conn) error) error {
	ctx := context.Background()
	if _, err := c.q.ExecContext(ctx, "SAVEPOINT w"); err != nil {
		return &txError{err}
	}
	if err := fn(c); err != nil {
		if _, rerr := c.q.ExecContext(ctx, "ROLLBACK TO w"); rerr != nil {
			return &txError{rerr}
		}
		if _, rerr := c.q.ExecContext(ctx, "RELEASE w"); rerr != nil {
			return &txError{rerr}
		}
		return err
	}
	if _, err := c.q.ExecContext(ctx, "RELEASE w"); err != nil {
		return &txError{err}
	}
	return nil
}

// txError is a failure of the batch's transaction itself, not of one writer.
type txError struct{ err error }

func (e *txError) Error() string { return e.err.Error() }
func (e *txError) Unwrap() error { return e.err }

func isTxError(err error) bool {
	_, tx := err.(*txError)
	return tx
}
