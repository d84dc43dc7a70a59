package worker

import (
	"math/rand/v2"
	"time"
)

// backoff is capped exponential back-off with full jitter: the n-th retry (n from 0)
// waits a uniformly random time in [0, min(cap, base·2ⁿ)). Full jitter spreads a
// fleet of workers that lost the orchestrator at the same moment, so they do not
// come back in lock-step, as they would with a flat retry interval.
type backoff struct {
	base, cap time.Duration
	n         int
	rand      func(n int64) int64 // rand.Int64N; replaceable in tests
}

func newBackoff(base, cap time.Duration) *backoff {
	if base <= 0 {
		base = time.Second
	}
	if cap < base {
		cap = base
	}
	return &backoff{base: base, cap: cap, rand: rand.Int64N}
}

// ceiling is the upper bound of the n-th delay.
func (b *backoff) ceiling(n int) time.Duration {
	d := b.base
	for i := 0; i < n && d < b.cap; i++ {
		d *= 2
	}
	return min(d, b.cap)
}

// next returns the delay before the next retry and counts the retry.
func (b *backoff) next() time.Duration {
	c := b.ceiling(b.n)
	b.n++
	if c <= 0 {
		return 0
	}
	return time.Duration(b.rand(int64(c)))
}

// attempts is how many retries were counted since the last reset.
func (b *backoff) attempts() int { return b.n }

// reset starts over after a connection proved stable.
func (b *backoff) reset() { b.n = 0 }
