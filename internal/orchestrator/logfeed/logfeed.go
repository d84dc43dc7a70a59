// Package logfeed hands what a worker's log upload stored to the follow
// streams of that job on this instance, and tells them when the job moved. A
// follower therefore reads the store only to catch up (when it starts, when it
// fell behind, when another instance stored the bytes), never on a timer of its
// own several times a second.
package logfeed

import "sync"

// Feed is the mailboxes of the followers of each job. Safe for concurrent
// use.
type Feed struct {
	mu   sync.Mutex
	subs map[string]map[*Sub]struct{}
}

// Piece is output stored for a job: Data at Offset of Attempt's output,
// exactly as it is in the store.
type Piece struct {
	Attempt int
	Offset  int64
	Data    []byte
}

// maxPending bounds what waits in one follower's mailbox; past it the
// pieces are dropped and the follower reads the store instead.
const maxPending = 1 << 20

// Sub is one follower's mailbox.
type Sub struct {
	wake    chan struct{} // holds one token while something is waiting
	mu      sync.Mutex
	pieces  []Piece
	size    int
	catchUp bool // something was dropped or is not in pieces: read the store
	moved   bool // the job changed state
}

// New returns a feed without followers.
func New() *Feed { return &Feed{subs: map[string]map[*Sub]struct{}{}} }

// Subscribe opens a mailbox for a follower of jobID.
func (f *Feed) Subscribe(jobID string) *Sub {
	s := &Sub{wake: make(chan struct{}, 1)}
	f.mu.Lock()
	if f.subs[jobID] == nil {
		f.subs[jobID] = map[*Sub]struct{}{}
	}
	f.subs[jobID][s] = struct{}{}
	f.mu.Unlock()
	return s
}

// Unsubscribe closes the mailbox.
func (f *Feed) Unsubscribe(jobID string, s *Sub) {
	f.mu.Lock()
	delete(f.subs[jobID], s)
	if len(f.subs[jobID]) == 0 {
		delete(f.subs, jobID)
	}
	f.mu.Unlock()
}

// each runs fn on every follower of jobID, then wakes it.
func (f *Feed) each(jobID string, fn func(*Sub)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for s := range f.subs[jobID] {
		s.mu.Lock()
		fn(s)
		s.mu.Unlock()
		select {
		case s.wake <- struct{}{}:
		default:
		}
	}
}

// Stored passes a piece the store now holds. Data must not change afterwards.
func (f *Feed) Stored(jobID string, p Piece) {
	f.each(jobID, func(s *Sub) {
		if s.catchUp || s.size+len(p.Data) > maxPending {
			s.pieces, s.size, s.catchUp = nil, 0, true
			return
		}
		s.pieces = append(s.pieces, p)
		s.size += len(p.Data)
	})
}

// Changed says the job's log changed in a way no piece describes (a cut at
// the size limit): followers read the store.
func (f *Feed) Changed(jobID string) {
	f.each(jobID, func(s *Sub) { s.pieces, s.size, s.catchUp = nil, 0, true })
}

// Moved says the job changed state.
func (f *Feed) Moved(jobID string) {
	f.each(jobID, func(s *Sub) { s.moved = true })
}

// Wake holds a token while something waits in the mailbox.
func (s *Sub) Wake() <-chan struct{} { return s.wake }

// Take empties the mailbox: the pieces passed since the last Take, whether
// the follower must read the store instead (something was dropped or is not
// in pieces), and whether the job changed state.
func (s *Sub) Take() (pieces []Piece, catchUp, moved bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	pieces, catchUp, moved = s.pieces, s.catchUp, s.moved
	s.pieces, s.size, s.catchUp, s.moved = nil, 0, false, false
	return pieces, catchUp, moved
}
