package rpc

import (
	"testing"
	"time"
)

// One record a minute per worker, carrying the count of the refusals it
// stands for.
func TestRefusalLogCounts(t *testing.T) {
	t.Parallel()
	var l refusalLog
	t0 := time.Now()
	if due, n := l.due("w1", t0); !due || n != 1 {
		t.Fatalf("first refusal: %v %d", due, n)
	}
	for i := range 5 {
		if due, _ := l.due("w1", t0.Add(time.Duration(i+1)*time.Second)); due {
			t.Fatalf("refusal %d within the minute logged", i+2)
		}
	}
	if due, n := l.due("w2", t0.Add(time.Second)); !due || n != 1 {
		t.Fatalf("another worker: %v %d", due, n)
	}
	if due, n := l.due("w1", t0.Add(sessionRefusalEvery+time.Second)); !due || n != 6 {
		t.Fatalf("after the minute: %v %d, want the 5 held back and this one", due, n)
	}
}
