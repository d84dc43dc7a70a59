package worker

import (
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/config"
	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
)

// link is the state of the worker's session with the orchestrator: what
// the last registration said (the worker's id, its timers and type), when
// the orchestrator last answered, whether the stream is up, and the
// self-fence limit that follows from the orchestrator's heartbeat timeout
// (fence.go). The session loop writes it; Status, Healthy and the
// heartbeats read it.
type link struct {
	log          *slog.Logger
	ownType      bool          // [worker] persistent is the worker's own, not the admin's
	selfFenceCfg time.Duration // [worker] self_fence_after as configured

	registered     chan struct{} // closed at the first successful registration
	registeredOnce sync.Once

	mu           sync.Mutex
	workerID     string
	hbInterval   time.Duration
	pingInterval time.Duration // the stream's keep-alive interval the orchestrator announced; 0: Timers.PingInterval
	persistent   bool          // the worker's type in force: its own, or the admin's
	connected    bool          // the stream is open
	retries      int           // reconnect attempts since the last good connection
	lastAck      time.Time     // when the last request the orchestrator answered was sent
	lastProgress time.Time     // the loop or a reconnect attempt did something
	fenceAfter   time.Duration // effective self-fence limit (see fenceLimit)
}

func newLink(opt *Options) *link {
	return &link{log: opt.Logger, ownType: opt.OwnType, selfFenceCfg: opt.SelfFenceAfter, registered: make(chan struct{}),
		persistent: opt.Persistent, fenceAfter: opt.SelfFenceAfter}
}

// hasRegistered reports whether this process has registered at least once.
func (l *link) hasRegistered() bool {
	select {
	case <-l.registered:
		return true
	default:
		return false
	}
}

// register takes what a registration answered, sent at sent, and returns
// the heartbeat interval the orchestrator asks for. A worker whose type is
// not its own takes the one an admin gave it.
func (l *link) register(resp protocol.RegisterResponse, sent time.Time) time.Duration {
	l.mu.Lock()
	l.workerID = resp.WorkerID
	if resp.HeartbeatIntervalSeconds > 0 {
		l.hbInterval = seconds(resp.HeartbeatIntervalSeconds)
	}
	if resp.PingIntervalSeconds > 0 {
		l.pingInterval = seconds(resp.PingIntervalSeconds)
	}
	interval := l.hbInterval
	differs := resp.WorkerType.Valid() && (resp.WorkerType == protocol.Persistent) != l.persistent
	if differs && !l.ownType {
		l.persistent = resp.WorkerType == protocol.Persistent
	}
	l.ackedLocked(sent)
	l.lastProgress = time.Now()
	l.mu.Unlock()
	l.registeredOnce.Do(func() { close(l.registered) })
	l.log.Info("registered with the orchestrator", "worker_id", resp.WorkerID, "protocol", resp.Protocol)
	switch {
	case differs && !l.ownType:
		l.log.Info("taking the worker type an admin gave this worker", "worker_type", resp.WorkerType)
	case differs:
		l.log.Warn("an admin registered this worker with another type; keeping the one this worker's configuration sets",
			"worker_type", resp.WorkerType, "configured_persistent", l.persistent)
	}
	return interval
}

// id is the worker id the orchestrator gave; "" before the first
// registration.
func (l *link) id() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.workerID
}

func (l *link) isPersistent() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.persistent
}

// heartbeatInterval is the configured interval, else the one the
// orchestrator asked for, else the default.
func (l *link) heartbeatInterval(configured time.Duration) time.Duration {
	if configured > 0 {
		return configured
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.hbInterval > 0 {
		return l.hbInterval
	}
	return config.DefaultHeartbeatInterval // an orchestrator that does not say (protocol 1)
}

// streamPingInterval is the stream's keep-alive interval: the one the
// orchestrator announced at registration, else fallback. Trusting our own
// guess alone would either reconnect healthy streams (the orchestrator
// pings less often) or sit on a dead one for minutes (it pings more often).
func (l *link) streamPingInterval(fallback time.Duration) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.pingInterval > 0 {
		return l.pingInterval
	}
	return fallback
}

// acked records that the orchestrator answered a request sent at sent.
func (l *link) acked(sent time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.ackedLocked(sent)
}

// ackedLocked: the orchestrator heard from this worker no earlier than
// sent, and the self-fence limit counts from there: counting from the
// answer would let a slow answer eat the margin between the limit and the
// orchestrator's timeout.
func (l *link) ackedLocked(sent time.Time) {
	if sent.After(l.lastAck) {
		l.lastAck = sent
	}
}

// lastAcked is when the last request the orchestrator answered was sent.
func (l *link) lastAcked() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lastAck
}

// progressed records that the loop or a reconnect attempt did something.
func (l *link) progressed() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lastProgress = time.Now()
}

// up records an open stream.
func (l *link) up() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.connected, l.retries = true, 0
}

// reconnecting records a lost connection and the reconnect attempts since
// the last good one.
func (l *link) reconnecting(attempts int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.connected, l.retries, l.lastProgress = false, attempts, time.Now()
}

// refused records a connection the orchestrator refused (a token it no
// longer takes).
func (l *link) refused() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.connected = false
}

// fenceLimit is the effective self-fence limit.
func (l *link) fenceLimit() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.fenceAfter
}

// setFenceLimit applies the orchestrator's timers from a registration and
// logs the effective limit when it changes; it returns the limit.
func (l *link) setFenceLimit(timeout, interval time.Duration) time.Duration {
	limit := fenceLimit(l.selfFenceCfg, timeout, interval)
	l.mu.Lock()
	changed := limit != l.fenceAfter
	l.fenceAfter = limit
	l.mu.Unlock()
	switch {
	case !changed:
	case l.selfFenceCfg > 0 && limit < l.selfFenceCfg:
		l.log.Warn("self_fence_after is not safely below the orchestrator's heartbeat timeout; using a shorter limit",
			"self_fence_after", l.selfFenceCfg.String(), "heartbeat_timeout", timeout.String(), "effective", limit.String())
	default:
		l.log.Info("self-fence limit", "effective", limit.String(), "heartbeat_timeout", timeout.String())
	}
	return limit
}

// healthy is nil while heartbeats are acknowledged, or while the worker is
// visibly trying to reconnect (see Worker.Healthy).
func (l *link) healthy(requestTimeout, reconnectMax time.Duration) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	hb := l.hbInterval
	if hb <= 0 {
		hb = config.DefaultHeartbeatInterval
	}
	if !l.lastAck.IsZero() && time.Since(l.lastAck) < 3*hb+requestTimeout {
		return nil
	}
	limit := reconnectMax + 3*requestTimeout + hb
	if since := time.Since(l.lastProgress); since > limit {
		return fmt.Errorf("no heartbeat acknowledged and no reconnect attempt for %s", since.Round(time.Second))
	}
	return nil
}

// state is what Status says of the connection: the worker id ("" before
// the first registration) and the reconnect attempts while the stream is
// down (0 otherwise).
func (l *link) state() (workerID string, reconnecting int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.connected {
		reconnecting = l.retries
	}
	return l.workerID, reconnecting
}
