package worker

import (
	"net"
	"strings"
	"testing"
	"time"
)

// With several orchestrator URLs the worker goes to the next one when the
// current one cannot be reached, and round the list again when that one
// goes too; jobs see the URL in use.
func TestFailsOverToTheNextURL(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "http://" + l.Addr().String()
	l.Close() // nothing listens there now: connection refused
	a, b := newFakeOrch(t), newFakeOrch(t)
	r := startWorker(t, a, func(o *Options) { o.URL = dead + ", " + a.url() + "," + b.url() })
	a.connected(1)
	if got := r.w.c.CurrentURL(); got != a.url() {
		t.Fatalf("worker uses %s, want %s", got, a.url())
	}
	if !strings.Contains(r.logs.String(), "trying the next configured URL") {
		t.Errorf("the move to the next URL was not logged")
	}
	a.down.Store(true)
	a.dropStreams()
	b.connected(1)
	if got := r.w.c.CurrentURL(); got != b.url() {
		t.Fatalf("worker uses %s after the second went down, want %s", got, b.url())
	}
	// Heartbeats follow the stream.
	b.waitFor("a heartbeat at the third URL", 5*time.Second, func() bool { return len(b.heartbeats) > 0 })
}
