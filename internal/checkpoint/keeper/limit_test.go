package keeper

import (
	"bytes"
	"context"
	"io"
	"testing"
	"time"
)

// The limiter holds a copy to its rate (within the burst of a tenth of a
// second), and a rate of 0 lets everything through.
func TestLimiter(t *testing.T) {
	t.Parallel()
	const rate = 4 << 20
	l := NewLimiter(rate)
	data := bytes.Repeat([]byte("x"), 2<<20)
	start := time.Now()
	n, err := io.Copy(io.Discard, l.Reader(context.Background(), bytes.NewReader(data)))
	took := time.Since(start)
	if err != nil || n != int64(len(data)) {
		t.Fatal(n, err)
	}
	if min := time.Duration(float64(len(data)-rate/10) / rate * float64(time.Second)); took < min {
		t.Fatalf("2 MiB at 4 MiB/s took %s, less than %s", took, min)
	}
	l.SetRate(0)
	if _, err := io.Copy(io.Discard, l.Reader(context.Background(), bytes.NewReader(data))); err != nil {
		t.Fatal(err)
	}
	// A cancelled context ends a limited copy.
	l.SetRate(1)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := io.Copy(io.Discard, l.Reader(ctx, bytes.NewReader(data))); err == nil {
		t.Fatal("a cancelled copy went on")
	}
}
