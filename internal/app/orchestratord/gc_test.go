package orchestratord

import (
	"runtime"
	"runtime/debug"
	"testing"
)

// The percent set for the live heap stays between Go's default and the cap.
func TestSetGCPercent(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	runtime.GC()
	setGCPercent()
	if p := debug.SetGCPercent(100); p < 100 || p > 1600 {
		t.Errorf("GC percent %d, want 100 to 1600", p)
	}
}

// GOGC or GOMEMLIMIT in the environment leaves the collector alone.
func TestTuneGCRespectsEnvironment(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(123))
	for _, name := range []string{"GOGC", "GOMEMLIMIT"} {
		tuneGC(func(k string) string {
			if k == name {
				return "200"
			}
			return ""
		})
		if p := debug.SetGCPercent(123); p != 123 {
			t.Errorf("with %s set, GC percent %d, want 123 as it was", name, p)
		}
	}
}

// A live heap larger than the minimum goal gets Go's default.
func TestSetGCPercentLargeHeap(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	big := make([]byte, 2*minHeapGoal)
	runtime.GC()
	setGCPercent()
	runtime.KeepAlive(big)
	if p := debug.SetGCPercent(100); p != 100 {
		t.Errorf("GC percent %d with %d MiB live, want 100", p, len(big)>>20)
	}
}
