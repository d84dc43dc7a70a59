package keeper

import (
	"context"
	"io"
	"sync"
	"time"
)

// Limiter is a token bucket in bytes per second shared by every upload of a
// worker, so that together they leave the training's disk and network
// alone; a rate of 0 is no limit.
type Limiter struct {
	mu     sync.Mutex
	rate   float64 // bytes per second; 0 unlimited
	tokens float64
	last   time.Time
}

// NewLimiter returns a Limiter at bytesPerSecond.
func NewLimiter(bytesPerSecond int64) *Limiter {
	l := &Limiter{}
	l.SetRate(bytesPerSecond)
	return l
}

// SetRate changes the rate for what is read from now on.
func (l *Limiter) SetRate(bytesPerSecond int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.rate = float64(max(bytesPerSecond, 0))
	l.tokens, l.last = 0, time.Now()
}

// burst is how much may pass at once: a tenth of a second's worth.
func (l *Limiter) burst() float64 { return max(l.rate/10, 64<<10) }

// wait blocks until n bytes may pass.
func (l *Limiter) wait(ctx context.Context, n int) error {
	for {
		l.mu.Lock()
		if l.rate == 0 {
			l.mu.Unlock()
			return nil
		}
		now := time.Now()
		l.tokens = min(l.tokens+now.Sub(l.last).Seconds()*l.rate, l.burst())
		l.last = now
		if l.tokens >= float64(n) || l.tokens >= l.burst() {
			l.tokens -= float64(n)
			l.mu.Unlock()
			return nil
		}
		need := time.Duration((float64(n) - l.tokens) / l.rate * float64(time.Second))
		l.mu.Unlock()
		t := time.NewTimer(min(need, 100*time.Millisecond))
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}

// chunk is the most one read takes from a limited reader.
const chunk = 256 << 10

// Reader passes r's bytes at the limiter's rate.
func (l *Limiter) Reader(ctx context.Context, r io.Reader) io.Reader {
	return &limitedReader{ctx: ctx, r: r, l: l}
}

type limitedReader struct {
	ctx context.Context
	r   io.Reader
	l   *Limiter
}

func (lr *limitedReader) Read(p []byte) (int, error) {
	if len(p) > chunk {
		p = p[:chunk]
	}
	n, err := lr.r.Read(p)
	if n > 0 {
		if werr := lr.l.wait(lr.ctx, n); werr != nil {
			return n, werr
		}
	}
	return n, err
}
