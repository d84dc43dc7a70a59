package orchtest

import (
	"testing"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/config"
)

// TimerSet is the orchestrator's timers, as [workers] and [jobs] set them
// (and [auth] for its two background loops).
type TimerSet struct {
	HeartbeatInterval     time.Duration
	HeartbeatTimeout      time.Duration
	HealthCheckInterval   time.Duration
	StartupGrace          time.Duration
	AckTimeout            time.Duration
	EphemeralCleanupAfter time.Duration
	PingInterval          time.Duration
	SchedulerInterval     time.Duration
	CancelGrace           time.Duration
	CancelReportTimeout   time.Duration
	RecheckInterval       time.Duration
	FailureAuditInterval  time.Duration
}

// Timers are the timers every in-process orchestrator of the tests runs
// with. The loops tick fast, so a test sees a change soon after it happens;
// the deadlines stay long, because these suites run with the race detector
// beside other suites on two shared cores, and a deadline that runs out there
// fails a correct test. A site that needs other timers copies this value and
// changes the fields it must, saying why.
var Timers = TimerSet{
	// Fast beats and checks: a connected agent shows as such at once.
	HeartbeatInterval:   100 * time.Millisecond,
	HealthCheckInterval: 100 * time.Millisecond,
	// 100 beats: on a loaded machine an agent's heartbeat can wait seconds
	// for the store, and a worker declared lost has its stream closed for
	// good. Tests of a lost worker cut it off and wait this out.
	HeartbeatTimeout: 10 * time.Second,
	// No grace after a start: a test's workers register after it.
	StartupGrace: 0,
	// An agent acknowledges a dispatch after reading it off its stream; on a
	// loaded machine that has taken over 5 s, and an attempt withdrawn for it
	// answers the late report with 409. Tests of the deadline set theirs.
	AckTimeout: 15 * time.Second,
	// As production: no test waits for an ephemeral worker's removal.
	EphemeralCleanupAfter: time.Hour,
	PingInterval:          200 * time.Millisecond,
	SchedulerInterval:     100 * time.Millisecond,
	// Long enough for workerd's demo trainer to leave on SIGTERM, short
	// enough that a test of the SIGKILL that follows does not wait long.
	CancelGrace: 300 * time.Millisecond,
	// A loaded machine can take a second to send an agent's cancelled report.
	CancelReportTimeout: 3 * time.Second,
	// Revoked tokens and failed sign-ins are seen within a test's wait.
	RecheckInterval:      200 * time.Millisecond,
	FailureAuditInterval: 200 * time.Millisecond,
}

// Config is the default orchestrator configuration with these timers, an
// instance id naming the test and a configs directory of its own; the test
// maps it with orchestrator.OptionsFrom.
func (ts TimerSet) Config(t testing.TB) *config.Orchestrator {
	c := config.DefaultOrchestrator()
	c.Server.InstanceID = "test-" + t.Name()
	c.Paths.ConfigsDir = t.TempDir()
	w, j := &c.Workers, &c.Jobs
	w.HeartbeatInterval = config.D(ts.HeartbeatInterval)
	w.HeartbeatTimeout = config.D(ts.HeartbeatTimeout)
	w.HealthCheckInterval = config.D(ts.HealthCheckInterval)
	w.StartupGrace = config.D(ts.StartupGrace)
	w.AckTimeout = config.D(ts.AckTimeout)
	w.EphemeralCleanupAfter = config.D(ts.EphemeralCleanupAfter)
	w.PingInterval = config.D(ts.PingInterval)
	j.SchedulerInterval = config.D(ts.SchedulerInterval)
	j.CancelGrace = config.D(ts.CancelGrace)
	j.CancelReportTimeout = config.D(ts.CancelReportTimeout)
	c.Auth.RecheckInterval = config.D(ts.RecheckInterval)
	c.Auth.FailureAuditInterval = config.D(ts.FailureAuditInterval)
	return c
}
