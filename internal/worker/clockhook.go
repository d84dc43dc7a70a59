package worker

import (
	"os"
	"time"
)

// The fault suite needs a worker whose clock is minutes off. libfaketime
// cannot provide one: the Go runtime reads the clock through the vDSO, not
// through libc, so LD_PRELOAD never sees it (checked with Debian's faketime
// on both a cgo and a static binary). SIMPLETUNER_WORKERD_TEST_CLOCK_OFFSET,
// a Go duration such as "-10m", shifts the wall clock workerd reports
// instead. Unset, as everywhere but in that suite, the offset is zero.
const clockOffsetEnv = "SIMPLETUNER_WORKERD_TEST_CLOCK_OFFSET"

func clockOffsetFromEnv() time.Duration {
	d, err := time.ParseDuration(os.Getenv(clockOffsetEnv))
	if err != nil {
		return 0
	}
	return d
}

// wallClock is the time workerd reports as its own (heartbeats' sent_at).
func (w *Worker) wallClock() time.Time { return time.Now().Add(w.clockOffset) }
