package dashboard

import (
	"sync"
	"time"
)

// notices hold what the API said beside a success (the warnings of a
// submit) for the page the browser is sent to next: shown once, to the
// session that caused it, within noticeTTL. On another replica, or after a
// restart, the page simply shows none.
type notices struct {
	mu sync.Mutex
	m  map[string]notice // session hash + "\x00" + page key
}

type notice struct {
	lines []string
	at    time.Time
}

const (
	noticeTTL = time.Minute
	// maxNotices bounds the memory: the oldest go first.
	maxNotices = 1024
)

func (n *notices) put(s *session, key string, lines []string, now time.Time) {
	if len(lines) == 0 {
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.m == nil {
		n.m = map[string]notice{}
	}
	for k, v := range n.m {
		if now.Sub(v.at) > noticeTTL {
			delete(n.m, k)
		}
	}
	for len(n.m) >= maxNotices {
		var oldest string
		for k, v := range n.m {
			if oldest == "" || v.at.Before(n.m[oldest].at) {
				oldest = k
			}
		}
		delete(n.m, oldest)
	}
	n.m[s.idHash+"\x00"+key] = notice{lines: lines, at: now}
}

// take returns and forgets the notice of key for s.
func (n *notices) take(s *session, key string, now time.Time) []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	k := s.idHash + "\x00" + key
	v, ok := n.m[k]
	delete(n.m, k)
	if !ok || now.Sub(v.at) > noticeTTL {
		return nil
	}
	return v.lines
}
