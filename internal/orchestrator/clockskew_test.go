package orchestrator_test

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/store"
)

// A worker whose clock is 10 minutes off is neither refused nor taken for
// dead: its skew is only shown (clock_skew_seconds) and warned about once.
func TestClockSkewIsShownNotHeld(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, open func(testing.TB) store.Store) {
		e := setup(t, open(t))
		a := e.startAgent("skewed", nil, nil)
		if v := e.Worker(a.id)["clock_skew_seconds"]; v != nil {
			t.Fatalf("skew before any sent_at: %v", v)
		}
		for _, off := range []time.Duration{10 * time.Minute, -10 * time.Minute} {
			for range 3 {
				at := time.Now().Add(off).UTC().Format(time.RFC3339Nano)
				e.Must(a.heartbeat("idle", nil, map[string]any{"sent_at": at}), 200)
			}
			w := e.Worker(a.id)
			skew, _ := w["clock_skew_seconds"].(float64)
			if math.Abs(skew-off.Seconds()) > 5 || w["status"] != "idle" {
				t.Fatalf("offset %s: status %v, clock_skew_seconds %v", off, w["status"], w["clock_skew_seconds"])
			}
		}
		if n := strings.Count(e.logs.String(), "clock is far off"); n != 1 {
			t.Fatalf("%d skew warnings, want 1 (once until the skew is back under a minute)", n)
		}
		r := e.Must(a.heartbeat("idle", nil, map[string]any{"sent_at": "yesterday"}), 422)
		if !strings.Contains(string(r.Body), `sent_at`) {
			t.Fatalf("bad sent_at answer: %s", r.Body)
		}
	})
}
