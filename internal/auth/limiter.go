package auth

import (
	"net"
	"net/netip"
	"sync"
	"time"
)

// DefaultFailuresPerMinute is the protocol's default limit.
const DefaultFailuresPerMinute = 10

const (
	window          = time.Minute
	defaultMaxPeers = 100_000
	minPruneAt      = 1024
)

// FailureLimiter counts failed authentications per peer over a sliding
// one-minute window. See the package documentation for how callers combine
// it with WellFormed so that a valid credential is never refused.
//
// Memory is bounded: each peer keeps at most perMinute timestamps, peers with
// no failure in the last minute are pruned (amortised, as the map grows), and
// at most maxPeers peers are tracked; past that, arbitrary peers are evicted.
type FailureLimiter struct {
	mu       sync.Mutex
	limit    int
	now      func() time.Time
	base     time.Time // offsets are taken from here, keeping the monotonic clock
	peers    map[string]*failures
	pruneAt  int
	maxPeers int
}

// failures is a ring of the last `limit` failure times, as offsets from base.
type failures struct {
	times []time.Duration
	next  int // index of the oldest entry once the ring is full
}

// NewFailureLimiter allows perMinute failures per peer in any one-minute
// window; perMinute <= 0 means DefaultFailuresPerMinute (a zero from a
// missing setting must not switch the protection off). now is the clock
// (nil means time.Now).
func NewFailureLimiter(perMinute int, now func() time.Time) *FailureLimiter {
	return newFailureLimiter(perMinute, now, defaultMaxPeers)
}

func newFailureLimiter(perMinute int, now func() time.Time, maxPeers int) *FailureLimiter {
	if perMinute <= 0 {
		perMinute = DefaultFailuresPerMinute
	}
	if now == nil {
		now = time.Now
	}
	return &FailureLimiter{
		limit:    perMinute,
		now:      now,
		base:     now(),
		peers:    make(map[string]*failures),
		pruneAt:  min(minPruneAt, maxPeers),
		maxPeers: maxPeers,
	}
}

// Blocked reports whether peer has used up its failures (perMinute of them
// within the last minute; with the default, the 10th failure blocks), and if so how long until its oldest counted failure leaves it
// (always > 0; send Retry-After as the ceiling in seconds). Use LimitKey for
// the key.
func (l *FailureLimiter) Blocked(peer string) (retryAfter time.Duration, blocked bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	f, ok := l.peers[peer]
	if !ok {
		return 0, false
	}
	now := l.clock()
	if now-f.newest() >= window {
		delete(l.peers, peer) // nothing left in the window
		return 0, false
	}
	if len(f.times) < l.limit {
		return 0, false
	}
	if wait := f.times[f.next] + window - now; wait > 0 {
		return wait, true
	}
	return 0, false
}

// Fail records one failed authentication from peer.
func (l *FailureLimiter) Fail(peer string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.clock()
	f, ok := l.peers[peer]
	if !ok {
		if len(l.peers) >= l.pruneAt {
			l.prune(now)
		}
		f = &failures{}
		l.peers[peer] = f
	}
	if len(f.times) < l.limit {
		f.times = append(f.times, now)
		return
	}
	f.times[f.next] = now
	f.next = (f.next + 1) % l.limit
}

// prune drops peers with nothing in the window, evicts arbitrary peers if
// that is not enough to stay under maxPeers, and sets the next threshold so
// that pruning stays amortised O(1) per new peer.
func (l *FailureLimiter) prune(now time.Duration) {
	for k, f := range l.peers {
		if now-f.newest() >= window {
			delete(l.peers, k)
		}
	}
	if len(l.peers) >= l.maxPeers {
		keep := l.maxPeers * 9 / 10
		for k := range l.peers { // map order is unspecified: good enough here
			if len(l.peers) <= keep {
				break
			}
			delete(l.peers, k)
		}
	}
	l.pruneAt = min(max(2*len(l.peers), minPruneAt), l.maxPeers)
}

func (l *FailureLimiter) clock() time.Duration { return l.now().Sub(l.base) }

func (f *failures) newest() time.Duration {
	if f.next == 0 {
		return f.times[len(f.times)-1]
	}
	return f.times[f.next-1]
}

// LimitKey is the key a client's failures are counted under: its IPv4
// address, or for IPv6 the /64 it is in (written "2001:db8:1:2::/64"). One
// host commonly holds a whole /64 and can pick a fresh address for every
// request, so counting IPv6 addresses one by one would count nothing.
// Anything unparsable is returned as PeerKey returns it.
func LimitKey(remoteAddr string) string {
	a, err := netip.ParseAddr(PeerKey(remoteAddr))
	if err != nil || a.Is4() {
		return PeerKey(remoteAddr)
	}
	return netip.PrefixFrom(a, 64).Masked().String()
}

// PeerKey turns a remote address ("ip:port", "[ipv6]:port" or a bare IP) into
// the limiter key: the IP alone, canonical, so that new connections from one
// host share a counter. Anything unparsable is returned as is.
func PeerKey(remoteAddr string) string {
	if ap, err := netip.ParseAddrPort(remoteAddr); err == nil {
		return ap.Addr().Unmap().WithZone("").String()
	}
	if a, err := netip.ParseAddr(remoteAddr); err == nil {
		return a.Unmap().WithZone("").String()
	}
	if host, _, err := net.SplitHostPort(remoteAddr); err == nil {
		return host
	}
	return remoteAddr
}
