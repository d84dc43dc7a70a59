package logfeed

import (
	"bytes"
	"testing"
)

func woken(s *Sub) bool {
	select {
	case <-s.Wake():
		return true
	default:
		return false
	}
}

// Pieces reach the followers of their job only, in order, with one wake
// token however many arrive; Take empties the mailbox.
func TestPiecesReachTheirJobsFollowers(t *testing.T) {
	f := New()
	a, b, other := f.Subscribe("j_1"), f.Subscribe("j_1"), f.Subscribe("j_2")
	f.Stored("j_1", Piece{Attempt: 1, Offset: 0, Data: []byte("hello ")})
	f.Stored("j_1", Piece{Attempt: 1, Offset: 6, Data: []byte("world")})
	for _, s := range []*Sub{a, b} {
		if !woken(s) || woken(s) {
			t.Fatal("want exactly one wake token")
		}
		pieces, catchUp, moved := s.Take()
		if len(pieces) != 2 || pieces[1].Offset != 6 || catchUp || moved {
			t.Fatalf("took %+v catchUp=%v moved=%v", pieces, catchUp, moved)
		}
		if pieces, _, _ := s.Take(); len(pieces) != 0 {
			t.Fatal("a second Take found pieces again")
		}
	}
	if woken(other) {
		t.Fatal("another job's follower was woken")
	}
	f.Unsubscribe("j_1", a)
	f.Moved("j_1")
	if woken(a) {
		t.Fatal("an unsubscribed follower was woken")
	}
	if !woken(b) {
		t.Fatal("the job's move did not wake its follower")
	}
	if _, _, moved := b.Take(); !moved {
		t.Fatal("the job's move is not in its follower's mailbox")
	}
}

// A follower that falls more than maxPending behind, or whose log changed in
// a way no piece says, is told to read the store instead, and gets nothing
// more until it has taken that.
func TestAFollowerFallingBehindReadsTheStore(t *testing.T) {
	f := New()
	s := f.Subscribe("j_1")
	big := bytes.Repeat([]byte("x"), maxPending/2+1)
	f.Stored("j_1", Piece{Attempt: 1, Offset: 0, Data: big})
	f.Stored("j_1", Piece{Attempt: 1, Offset: int64(len(big)), Data: big})
	f.Stored("j_1", Piece{Attempt: 1, Offset: int64(2 * len(big)), Data: []byte("tail")})
	pieces, catchUp, _ := s.Take()
	if len(pieces) != 0 || !catchUp {
		t.Fatalf("after overflowing: %d pieces, catchUp=%v; want none and a catch-up", len(pieces), catchUp)
	}
	f.Stored("j_1", Piece{Attempt: 1, Offset: 9, Data: []byte("next")})
	if pieces, catchUp, _ = s.Take(); len(pieces) != 1 || catchUp {
		t.Fatalf("after the catch-up was taken: %d pieces, catchUp=%v", len(pieces), catchUp)
	}
	f.Stored("j_1", Piece{Attempt: 1, Offset: 13, Data: []byte("more")})
	f.Changed("j_1")
	if pieces, catchUp, _ = s.Take(); len(pieces) != 0 || !catchUp {
		t.Fatalf("after a change: %d pieces, catchUp=%v", len(pieces), catchUp)
	}
}
