package scheduler

import (
	"context"

	"github.com/simpletuner/simpletuner-orchestration/internal/store"
)

// order is the step of a pass that the teams change: the order the queue
// is taken in, the limits that hold a job back, and which running jobs
// yield to one that found no room. Without teams (one team, no GPU limit)
// it is the queue's own order, nothing is held back and nobody yields.
type order interface {
	// queue reads the queue in claim order.
	queue(ctx context.Context) queue
	// overLimit reports whether j may not take n more GPUs now; borrows,
	// whether it may then take what the pass leaves over.
	overLimit(j store.QueuedJob, n int) bool
	borrows(j store.QueuedJob) bool
	// took notes n GPUs given to j.
	took(j store.QueuedJob, n int)
	// reordersReservation: the order may put a job ahead of the one a
	// worker is held for, and the first job that finds no room then takes
	// the reservation over.
	reordersReservation() bool
	// weighsVictims: this pass weighs preemption for the jobs that found
	// no room; preempt does it.
	weighsVictims() bool
	preempt(ctx context.Context, s *Scheduler, waiting []store.QueuedJob)
}

// orderNow is the order of a pass: the teams' standing when teams change
// anything, else the queue's own.
func (s *Scheduler) orderNow(ctx context.Context) order {
	if t := s.teamsNow(ctx); t != nil {
		return t
	}
	return queueOrder{s: s}
}

// queueOrder is the queue's own order: priority, then submission.
type queueOrder struct{ s *Scheduler }

func (o queueOrder) queue(ctx context.Context) queue {
	return &queueReader{st: o.s.Store, noteStore: o.s.NoteStore, ctx: ctx}
}
func (queueOrder) overLimit(store.QueuedJob, int) bool                    { return false }
func (queueOrder) borrows(store.QueuedJob) bool                           { return false }
func (queueOrder) took(store.QueuedJob, int)                              {}
func (queueOrder) reordersReservation() bool                              { return false }
func (queueOrder) weighsVictims() bool                                    { return false }
func (queueOrder) preempt(context.Context, *Scheduler, []store.QueuedJob) {}
