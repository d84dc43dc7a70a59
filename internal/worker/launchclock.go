package worker

import (
	"context"
	"log/slog"
	"time"
)

// launchClock times the steps of an attempt's launch, from 'job received'
// to the trainer's exec, for the debug log's "launch timing": what each
// step cost is what the launch can be made cheaper by.
type launchClock struct {
	start, last time.Time
	fields      []any
}

func newLaunchClock() *launchClock {
	now := time.Now()
	return &launchClock{start: now, last: now}
}

// step ends the step called name (logged as name_us) and starts the next.
func (c *launchClock) step(name string) {
	if c == nil {
		return
	}
	now := time.Now()
	c.fields = append(c.fields, name+"_us", now.Sub(c.last).Microseconds())
	c.last = now
}

// log writes the steps and their total at debug level.
func (c *launchClock) log(log *slog.Logger) {
	if c == nil || !log.Enabled(context.Background(), slog.LevelDebug) {
		return
	}
	log.Debug("launch timing", append(c.fields, "total_us", c.last.Sub(c.start).Microseconds())...)
}
