package auth

import (
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"
)

type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{t: time.Date(2026, 1, 15, 10, 30, 0, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func TestFailureLimiterWindow(t *testing.T) {
	t.Parallel()
	clk := newFakeClock()
	l := NewFailureLimiter(3, clk.Now)
	const peer = "192.0.2.1"

	// Failures at t=0s, 10s, 20s: blocked once the third is in.
	for i := range 3 {
		if _, blocked := l.Blocked(peer); blocked {
			t.Fatalf("blocked after %d failures", i)
		}
		l.Fail(peer)
		if i < 2 {
			clk.Advance(10 * time.Second)
		}
	}
	wait, blocked := l.Blocked(peer)
	if !blocked || wait != 40*time.Second {
		t.Fatalf("after 3 failures: wait=%v blocked=%v, want 40s true", wait, blocked)
	}
	if _, blocked := l.Blocked("192.0.2.2"); blocked {
		t.Fatal("another peer is blocked")
	}

	// Sliding: at t=60s the first failure leaves the window.
	clk.Advance(39 * time.Second) // t=59s
	if wait, blocked := l.Blocked(peer); !blocked || wait != time.Second {
		t.Fatalf("t=59s: wait=%v blocked=%v", wait, blocked)
	}
	clk.Advance(time.Second) // t=60s
	if _, blocked := l.Blocked(peer); blocked {
		t.Fatal("t=60s: still blocked")
	}
	// One new failure refills the window; the oldest counted is now t=10s.
	l.Fail(peer)
	if wait, blocked := l.Blocked(peer); !blocked || wait != 10*time.Second {
		t.Fatalf("t=60s after a failure: wait=%v blocked=%v, want 10s", wait, blocked)
	}
	// A quiet minute forgets the peer altogether.
	clk.Advance(time.Minute)
	if _, blocked := l.Blocked(peer); blocked {
		t.Fatal("blocked after a quiet minute")
	}
	if n := l.tracked(); n != 0 {
		t.Fatalf("%d peers tracked after expiry", n)
	}
}

func TestFailureLimiterRetryAfterCeil(t *testing.T) {
	t.Parallel()
	clk := newFakeClock()
	l := NewFailureLimiter(1, clk.Now)
	l.Fail("p")
	clk.Advance(59*time.Second + 500*time.Millisecond)
	wait, blocked := l.Blocked("p")
	if !blocked || wait != 500*time.Millisecond {
		t.Fatalf("wait=%v blocked=%v", wait, blocked)
	}
	// Callers round up, so Retry-After is never 0 while blocked.
	if secs := int((wait + time.Second - 1) / time.Second); secs != 1 {
		t.Fatalf("Retry-After = %d", secs)
	}
}

func TestFailureLimiterDefaults(t *testing.T) {
	t.Parallel()
	tests := []struct {
		perMinute, want int
	}{
		{0, DefaultFailuresPerMinute},
		{-5, DefaultFailuresPerMinute},
		{1, 1},
		{25, 25},
	}
	for _, tc := range tests {
		l := NewFailureLimiter(tc.perMinute, nil) // nil clock: time.Now
		for range tc.want - 1 {
			l.Fail("p")
		}
		if _, blocked := l.Blocked("p"); blocked {
			t.Errorf("perMinute=%d: blocked after %d failures", tc.perMinute, tc.want-1)
		}
		l.Fail("p")
		if wait, blocked := l.Blocked("p"); !blocked || wait <= 0 || wait > time.Minute {
			t.Errorf("perMinute=%d: after %d failures wait=%v blocked=%v", tc.perMinute, tc.want, wait, blocked)
		}
	}
}

func TestFailureLimiterMemoryBounded(t *testing.T) {
	t.Parallel()
	clk := newFakeClock()

	// Stale peers are pruned as new ones arrive.
	l := NewFailureLimiter(10, clk.Now)
	for i := range 5000 {
		l.Fail("old-" + strconv.Itoa(i))
	}
	clk.Advance(2 * time.Minute)
	for i := range 5000 {
		l.Fail("new-" + strconv.Itoa(i))
	}
	if n := l.tracked(); n > 5000+minPruneAt {
		t.Fatalf("%d peers tracked; stale ones were not pruned", n)
	}

	// Live peers never exceed the cap, and a peer's history is at most perMinute.
	const maxPeers = 500
	l = newFailureLimiter(3, clk.Now, maxPeers)
	for i := range 20 * maxPeers {
		l.Fail(fmt.Sprintf("10.0.%d.%d", i/256, i%256))
		if n := l.tracked(); n > maxPeers {
			t.Fatalf("%d peers tracked, cap %d", n, maxPeers)
		}
	}
	for range 100 {
		l.Fail("hot")
	}
	l.mu.Lock()
	h := len(l.peers["hot"].times)
	l.mu.Unlock()
	if h != 3 {
		t.Fatalf("hot peer keeps %d timestamps, want 3", h)
	}
}

func TestFailureLimiterConcurrent(t *testing.T) {
	t.Parallel()
	l := NewFailureLimiter(5, nil)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 500 {
				p := strconv.Itoa((g*500 + i) % 50)
				l.Fail(p)
				l.Blocked(p)
			}
		}()
	}
	wg.Wait()
	if _, blocked := l.Blocked("0"); !blocked {
		t.Fatal("a peer with 80 failures is not blocked")
	}
}

func TestPeerKey(t *testing.T) {
	t.Parallel()
	tests := []struct{ in, want string }{
		{"192.0.2.1:54321", "192.0.2.1"},
		{"192.0.2.1", "192.0.2.1"},
		{"[2001:db8::1]:443", "2001:db8::1"},
		{"[2001:DB8:0::1]:443", "2001:db8::1"},
		{"2001:db8::1", "2001:db8::1"},
		{"[::ffff:192.0.2.1]:80", "192.0.2.1"},
		{"[fe80::1%eth0]:80", "fe80::1"},
		{"localhost:8080", "localhost"},
		{"@", "@"},
		{"", ""},
	}
	for _, tc := range tests {
		if got := PeerKey(tc.in); got != tc.want {
			t.Errorf("PeerKey(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestLimitKey(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"192.0.2.1:54321":                "192.0.2.1",
		"[2001:db8:1:2:aaaa::1]:443":     "2001:db8:1:2::/64",
		"[2001:db8:1:2:ffff:ffff::9]:80": "2001:db8:1:2::/64",
		"[2001:db8:1:3::1]:80":           "2001:db8:1:3::/64",
		"[::ffff:192.0.2.1]:80":          "192.0.2.1",
		"[fe80::1%eth0]:80":              "fe80::/64",
		"[::1]:8001":                     "::/64",
		"localhost:8080":                 "localhost",
	} {
		if got := LimitKey(in); got != want {
			t.Errorf("LimitKey(%q) = %q, want %q", in, got, want)
		}
	}
}

func (l *FailureLimiter) tracked() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.peers)
}
