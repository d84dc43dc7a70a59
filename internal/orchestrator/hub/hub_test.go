package hub

import (
	"fmt"
	"log/slog"
	"testing"
	"time"
)

// TestHubSlowReaderIsDroppedOthersServed: 2,000 streams, one never reads. Its
// buffer fills, it is closed and detached, and every other stream still gets
// every event without Send ever blocking: the test itself sends on the
// stream nobody reads, so a Send that waited for room would never return.
func TestHubSlowReaderIsDroppedOthersServed(t *testing.T) {
	t.Parallel()
	h := New(slog.New(slog.DiscardHandler))
	const n, events = 2000, streamBuffer * 2
	streams := make([]*Stream, n)
	for i := range streams {
		streams[i] = h.Attach(fmt.Sprintf("w_%d", i), "")
	}
	slow := streams[0]
	start := time.Now()
	slowTaken := 0
	for e := range events {
		for i := 1; i < n; i++ {
			if !h.Send(streams[i].WorkerID, "ping", map[string]int{"n": e}) {
				t.Fatalf("send to a reading stream failed")
			}
			<-streams[i].Events() // a prompt reader
		}
		if h.Send(slow.WorkerID, "ping", map[string]int{"n": e}) {
			slowTaken++
		}
	}
	t.Logf("%d sends took %s", events*n, time.Since(start).Round(time.Millisecond))
	if slowTaken != streamBuffer {
		t.Fatalf("the stream that is never read took %d events; its buffer holds %d", slowTaken, streamBuffer)
	}
	select {
	case <-slow.Done():
	default:
		t.Fatal("the slow stream was not closed")
	}
	if h.Connected(slow.WorkerID) || h.Count() != n-1 || h.Dropped() != 1 {
		t.Fatalf("connected=%v count=%d dropped=%d", h.Connected(slow.WorkerID), h.Count(), h.Dropped())
	}
}

// TestHubReplacedStreamDetachKeepsSuccessor: the replaced stream's cleanup
// must not remove the stream that replaced it.
func TestHubReplacedStreamDetachKeepsSuccessor(t *testing.T) {
	t.Parallel()
	h := New(slog.New(slog.DiscardHandler))
	old := h.Attach("w_1", "")
	cur := h.Attach("w_1", "")
	select {
	case <-old.Done():
	default:
		t.Fatal("replaced stream still open")
	}
	if h.Detach(old) {
		t.Fatal("detaching the replaced stream reported it current")
	}
	if !h.Connected("w_1") || !h.Send("w_1", "ping", struct{}{}) {
		t.Fatal("successor lost")
	}
	if !h.Detach(cur) || h.Connected("w_1") {
		t.Fatal("current stream not detached")
	}
}
