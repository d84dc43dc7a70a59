package orchestrator

import "sync"

// logFeed hands what a worker's log upload stored to the follow streams of
// that job on this instance, and tells them when the job moved. A follower
// therefore reads the store only to catch up (when it starts, when it fell
// behind, when another instance stored the bytes), never on a timer of its
// own several times a second.
type logFeed struct {
	mu   sync.Mutex
	subs map[string]map[*logSub]struct{}
}

// logPiece is output stored for a job: Data at Offset of Attempt's output,
// exactly as it is in the store.
type logPiece struct {
	Attempt int
	Offset  int64
	Data    []byte
}

// maxPendingLog bounds what waits in one follower's mailbox; past it the
// pieces are dropped and the follower reads the store instead.
const maxPendingLog = 1 << 20

// logSub is one follower's mailbox.
type logSub struct {
	wake    chan struct{} // holds one token while something is waiting
	mu      sync.Mutex
	pieces  []logPiece
	size    int
	catchUp bool // something was dropped or is not in pieces: read the store
	moved   bool // the job changed state
}

func newLogFeed() *logFeed { return &logFeed{subs: map[string]map[*logSub]struct{}{}} }

func (f *logFeed) subscribe(jobID string) *logSub {
	s := &logSub{wake: make(chan struct{}, 1)}
	f.mu.Lock()
	if f.subs[jobID] == nil {
		f.subs[jobID] = map[*logSub]struct{}{}
	}
	f.subs[jobID][s] = struct{}{}
	f.mu.Unlock()
	return s
}

func (f *logFeed) unsubscribe(jobID string, s *logSub) {
	f.mu.Lock()
	delete(f.subs[jobID], s)
	if len(f.subs[jobID]) == 0 {
		delete(f.subs, jobID)
	}
	f.mu.Unlock()
}

// each runs fn on every follower of jobID, then wakes it.
func (f *logFeed) each(jobID string, fn func(*logSub)) {
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

// stored passes a piece the store now holds. Data must not change afterwards.
func (f *logFeed) stored(jobID string, p logPiece) {
	f.each(jobID, func(s *logSub) {
		if s.catchUp || s.size+len(p.Data) > maxPendingLog {
			s.pieces, s.size, s.catchUp = nil, 0, true
			return
		}
		s.pieces = append(s.pieces, p)
		s.size += len(p.Data)
	})
}

// changed says the job's log changed in a way no piece describes (a cut at
// the size limit): followers read the store.
func (f *logFeed) changed(jobID string) {
	f.each(jobID, func(s *logSub) { s.pieces, s.size, s.catchUp = nil, 0, true })
}

// moved says the job changed state.
func (f *logFeed) moved(jobID string) {
	f.each(jobID, func(s *logSub) { s.moved = true })
}

// take empties the mailbox.
func (s *logSub) take() (pieces []logPiece, catchUp, moved bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	pieces, catchUp, moved = s.pieces, s.catchUp, s.moved
	s.pieces, s.size, s.catchUp, s.moved = nil, 0, false, false
	return pieces, catchUp, moved
}
