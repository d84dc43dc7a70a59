package storetest

import (
	"sync"
	"testing"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/store"
)

var authFlowTests = []test{
	{"AuthFlowTakeOnce", testAuthFlowTakeOnce},
	{"AuthFlowUnknown", testAuthFlowUnknown},
	{"AuthFlowExpired", testAuthFlowExpired},
	{"AuthFlowDuplicateState", testAuthFlowDuplicateState},
	{"AuthFlowSweptOnPut", testAuthFlowSweptOnPut},
	{"AuthFlowConcurrentTake", testAuthFlowConcurrentTake},
	{"AuthFlowRefused", testAuthFlowRefused},
}

func newAuthFlow(created time.Time) store.AuthFlow {
	return store.AuthFlow{StateHash: randHex() + randHex(), Provider: "oidc", Nonce: randHex(), Verifier: randHex() + randHex(),
		ReturnTo: "/ui/queue?status=running", CreatedAt: created, ExpiresAt: created.Add(10 * time.Minute)}
}

func testAuthFlowTakeOnce(t *testing.T, s store.Store) {
	f := newAuthFlow(t0)
	noErr(t, s.PutAuthFlow(t.Context(), f), "PutAuthFlow")
	got, err := s.TakeAuthFlow(t.Context(), f.StateHash, at(time.Minute))
	noErr(t, err, "TakeAuthFlow")
	equal(t, got, f, "taken flow")
	_, err = s.TakeAuthFlow(t.Context(), f.StateHash, at(time.Minute))
	wantErr(t, err, store.ErrNotFound, "second take of the same state")
}

func testAuthFlowUnknown(t *testing.T, s store.Store) {
	noErr(t, s.PutAuthFlow(t.Context(), newAuthFlow(t0)), "PutAuthFlow")
	_, err := s.TakeAuthFlow(t.Context(), randHex()+randHex(), at(time.Minute))
	wantErr(t, err, store.ErrNotFound, "take of a state never stored")
	_, err = s.TakeAuthFlow(t.Context(), "", at(time.Minute))
	wantErr(t, err, store.ErrNotFound, "take of an empty state")
}

func testAuthFlowExpired(t *testing.T, s store.Store) {
	f := newAuthFlow(t0)
	noErr(t, s.PutAuthFlow(t.Context(), f), "PutAuthFlow")
	_, err := s.TakeAuthFlow(t.Context(), f.StateHash, f.ExpiresAt)
	wantErr(t, err, store.ErrNotFound, "take at the expiry")
	// The expired take used the flow up: it is not there earlier either.
	_, err = s.TakeAuthFlow(t.Context(), f.StateHash, t0)
	wantErr(t, err, store.ErrNotFound, "take after an expired take")
}

func testAuthFlowDuplicateState(t *testing.T, s store.Store) {
	f := newAuthFlow(t0)
	noErr(t, s.PutAuthFlow(t.Context(), f), "PutAuthFlow")
	g := newAuthFlow(at(time.Second))
	g.StateHash = f.StateHash
	wantErr(t, s.PutAuthFlow(t.Context(), g), store.ErrDuplicate, "a second flow with the same state")
	got, err := s.TakeAuthFlow(t.Context(), f.StateHash, at(time.Minute))
	noErr(t, err, "TakeAuthFlow")
	equal(t, got, f, "the first flow, unchanged")
}

// Expired flows are deleted when a new one is stored: a state hash can be
// stored again once its flow expired, and a live flow is left alone.
func testAuthFlowSweptOnPut(t *testing.T, s store.Store) {
	old, live := newAuthFlow(t0), newAuthFlow(at(5*time.Minute))
	noErr(t, s.PutAuthFlow(t.Context(), old), "PutAuthFlow old")
	noErr(t, s.PutAuthFlow(t.Context(), live), "PutAuthFlow live")
	again := newAuthFlow(old.ExpiresAt)
	again.StateHash = old.StateHash
	noErr(t, s.PutAuthFlow(t.Context(), again), "PutAuthFlow with the expired flow's state")
	got, err := s.TakeAuthFlow(t.Context(), old.StateHash, old.ExpiresAt.Add(time.Second))
	noErr(t, err, "TakeAuthFlow of the new flow")
	equal(t, got, again, "the new flow")
	_, err = s.TakeAuthFlow(t.Context(), live.StateHash, old.ExpiresAt.Add(time.Second))
	noErr(t, err, "TakeAuthFlow of the live flow")
}

// Orchestrators taking the same state at once: exactly one gets the flow.
func testAuthFlowConcurrentTake(t *testing.T, s store.Store) {
	const takers = 8
	for round := range 5 {
		f := newAuthFlow(t0)
		noErr(t, s.PutAuthFlow(t.Context(), f), "PutAuthFlow")
		var wg sync.WaitGroup
		start := make(chan struct{})
		errs := make([]error, takers)
		for i := range takers {
			wg.Go(func() {
				<-start
				_, errs[i] = s.TakeAuthFlow(t.Context(), f.StateHash, at(time.Minute))
			})
		}
		close(start)
		wg.Wait()
		won := 0
		for _, err := range errs {
			switch {
			case err == nil:
				won++
			default:
				wantErr(t, err, store.ErrNotFound, "a losing take")
			}
		}
		if won != 1 {
			t.Fatalf("round %d: %d of %d concurrent takes got the flow, want exactly 1", round, won, takers)
		}
	}
}

func testAuthFlowRefused(t *testing.T, s store.Store) {
	f := newAuthFlow(t0)
	f.StateHash = ""
	if err := s.PutAuthFlow(t.Context(), f); err == nil {
		t.Fatal("PutAuthFlow without a state hash: no error")
	}
	f = newAuthFlow(t0)
	f.ExpiresAt = t0
	if err := s.PutAuthFlow(t.Context(), f); err == nil {
		t.Fatal("PutAuthFlow expiring when made: no error")
	}
	_, err := s.TakeAuthFlow(t.Context(), f.StateHash, t0)
	wantErr(t, err, store.ErrNotFound, "take of a refused flow")
}
