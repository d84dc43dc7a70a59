package orchestratord

import (
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
)

// minHeapGoal is the least heap the collector lets the orchestrator reach
// before it collects. With Go's default (collect when the heap has doubled)
// a small heap is collected very often: the orchestrator allocates a few
// hundred kilobytes per job on a live heap of a few megabytes, and on a
// machine with many cores each collection wakes many mark workers. Once
// more than half of it is live, Go's default applies unchanged, so a large
// fleet's memory stays what it was.
const minHeapGoal = 64 << 20

var gcTunerOnce sync.Once

// tuneGC keeps the heap goal at minHeapGoal at least, unless GOGC or
// GOMEMLIMIT is set: then the runtime does as the user asked.
func tuneGC(getenv func(string) string) {
	if getenv("GOGC") != "" || getenv("GOMEMLIMIT") != "" {
		return
	}
	gcTunerOnce.Do(func() {
		setGCPercent()
		armGCTuner()
	})
}

// gcSentinel is garbage from the moment it is allocated: its cleanup runs
// after the next collection, sets the GC percent for the live heap that
// collection found and arms the next one.
type gcSentinel struct{ _ [64]byte } // not a tiny allocation, which could delay its cleanup

func armGCTuner() {
	runtime.AddCleanup(new(gcSentinel), func(struct{}) {
		setGCPercent()
		armGCTuner()
	}, struct{}{})
}

// setGCPercent sets the GC percent that puts the heap goal at minHeapGoal
// for the live heap, never less than Go's default of 100 and at most 1600:
// the runtime's own minimum heap (4 MiB at 100) grows with the percent, and
// past 1600 it would exceed minHeapGoal.
func setGCPercent() {
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(s)
	live := int64(max(s[0].Value.Uint64(), 1))
	debug.SetGCPercent(int(min(max(100, minHeapGoal*100/live-100), 1600)))
}
