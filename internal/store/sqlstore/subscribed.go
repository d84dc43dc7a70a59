package sqlstore

import (
	"context"
	"sync/atomic"
)

// subscribed remembers, on an engine with one writer, whether the webhooks
// table is empty, so that a change no subscription can want does not build
// its events or look for subscribers inside its transaction: submit, claim,
// acknowledgement and end of every job pass through the single writer, and
// a job's launch waits on two of them.
//
// It is exact because on such an engine every write transaction runs
// through this Store, one after another: a transaction that adds or removes
// a subscription forgets what was known before it writes, and the next
// transaction that emits looks again, inside its own transaction, where it
// sees that write. Where several processes write (PostgreSQL replicas), a
// subscription may appear from elsewhere at any moment, so every change
// looks, as before.
type subscribed struct {
	state atomic.Int32
}

const (
	subsUnknown int32 = iota
	subsNone
	subsSome
)

// forget is called, inside the transaction, before a subscription is
// written or deleted.
func (k *subscribed) forget() { k.state.Store(subsUnknown) }

// none reports whether no subscription exists, as transaction c sees it.
// It reads the table only when a subscription was added or removed since it
// last looked; on an engine with several writers it always says false.
func (s *Store) noSubscriptions(ctx context.Context, c conn) (bool, error) {
	if !s.d.GroupCommit {
		return false, nil
	}
	switch s.subs.state.Load() {
	case subsNone:
		return true, nil
	case subsSome:
		return false, nil
	}
	var exists bool
	if err := c.queryRow(ctx, `SELECT EXISTS (SELECT 1 FROM webhooks)`).Scan(&exists); err != nil {
		return false, err
	}
	if exists {
		s.subs.state.CompareAndSwap(subsUnknown, subsSome)
	} else {
		s.subs.state.CompareAndSwap(subsUnknown, subsNone)
	}
	return !exists, nil
}
