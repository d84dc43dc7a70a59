package worker

import (
	"testing"
	"time"
)

func TestFenceLimit(t *testing.T) {
	const s = time.Second
	for _, c := range []struct {
		configured, timeout, interval, want time.Duration
	}{
		{90 * s, 120 * s, 30 * s, 90 * s}, // the defaults agree
		{90 * s, 60 * s, 30 * s, 30 * s},  // the orchestrator's timeout is shorter: kept below it
		{90 * s, 60 * s, 5 * s, 45 * s},   // margin: a quarter of the timeout
		{10 * s, 120 * s, 30 * s, 10 * s}, // a shorter configured limit is kept
		{0, 120 * s, 30 * s, 90 * s},      // not configured: derived
		{90 * s, 0, 30 * s, 90 * s},       // an orchestrator that does not say
		{90 * s, 2 * s, 3 * s, 1 * s},     // an interval longer than the timeout still leaves a limit
		{1500 * time.Millisecond, time.Second, 100 * time.Millisecond, 750 * time.Millisecond},
	} {
		if got := fenceLimit(c.configured, c.timeout, c.interval); got != c.want {
			t.Errorf("fenceLimit(%s, %s, %s) = %s, want %s", c.configured, c.timeout, c.interval, got, c.want)
		}
		if got := fenceLimit(c.configured, c.timeout, c.interval); c.timeout > 0 && got >= c.timeout {
			t.Errorf("fenceLimit(%s, %s, %s) = %s is not below the timeout", c.configured, c.timeout, c.interval, got)
		}
	}
}
