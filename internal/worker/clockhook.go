//go:build faulthooks

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
// instead. The hook is built only into the fault suite's binaries (build
// tag faulthooks).
const clockOffsetEnv = "SIMPLETUNER_WORKERD_TEST_CLOCK_OFFSET"

func clockOffsetFromEnv() time.Duration {
	d, err := time.ParseDuration(os.Getenv(clockOffsetEnv))
	if err != nil {
		return 0
	}
	return d
}
