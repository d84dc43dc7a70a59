package rpc

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/audit"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator/authn"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator/transitions"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator/web"
	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
	"github.com/simpletuner/simpletuner-orchestration/internal/store"
)

// One worker identity, one workerd at a time. Two workerd processes started
// with the same token (a cloned machine image, a config copied to a second
// host) would otherwise take turns: each registration closes the other's
// stream and reports a different set of running attempts, so the jobs of one
// are requeued while they still run, and a job may end up on both. Each
// workerd sends the id of its installation (kept in its state directory, so a
// restart keeps it); the installation that registered last holds the session.
// Another one is refused while the holder is alive (heartbeats within
// heartbeat_timeout) and may take over only once the holder is offline, which
// makes a second workerd a cold standby rather than a competitor.

// sessionRefusalEvery spaces out the log line and audit record of the
// refusals of one worker's session (a second installation retries with
// back-off; a holder of the token making up installation ids would write a
// record per request): one each per worker and interval, with the count.
const sessionRefusalEvery = time.Minute

// maxSessionLen bounds the installation id taken from a request header.
const maxSessionLen = 64

// sessionOf is the installation id a request carries; "" for agents that send
// none (SimpleTuner's own agent), which are never refused for it.
func sessionOf(r *http.Request) string {
	sess := strings.TrimSpace(r.Header.Get(protocol.HeaderWorkerSession))
	if len(sess) > maxSessionLen {
		sess = sess[:maxSessionLen]
	}
	return sess
}

// sessionHeld reports whether wk's session belongs to a live installation
// other than sess.
func sessionHeld(wk store.Worker, sess string, now time.Time, timeout time.Duration) bool {
	if sess == "" || wk.Session == "" || sess == wk.Session {
		return false
	}
	return wk.Status != protocol.WorkerOffline && wk.LastHeartbeat != nil && now.Sub(*wk.LastHeartbeat) <= timeout
}

// checkSession refuses every request but a registration from an installation
// that does not hold the worker's session: it must register (and so take the
// session over) first, which it may only once the holder is offline.
func (s *Protocol) checkSession(r *http.Request, wk store.Worker) error {
	sess := sessionOf(r)
	if sess == "" || wk.Session == "" || sess == wk.Session {
		return nil
	}
	return s.refuseSession(r.Context(), wk, sess, authn.PeerIP(r), r.URL.Path)
}

// refuseSession logs and audits (at most once a minute per worker, with the
// refusals since the last record) and returns the 409 the refused workerd
// shows its admin.
func (s *Protocol) refuseSession(ctx context.Context, wk store.Worker, sess, ip, path string) error {
	if due, count := s.sessionRefusals.due(wk.ID, time.Now()); due {
		heard := "never"
		if wk.LastHeartbeat != nil {
			heard = time.Since(*wk.LastHeartbeat).Round(time.Millisecond).String() + " ago"
		}
		s.Log.Warn("refused a second workerd using the token of a worker another workerd is connected as",
			"worker_id", wk.ID, "name", wk.Name, "refused_session", shortSession(sess), "refused_ip", ip,
			"active_session", shortSession(wk.Session), "active_last_heard", heard, "path", path, "refusals", count)
		rec := audit.New(transitions.WorkerActor(wk), ip, "worker.session_refused", "worker", wk.ID, audit.Failure, map[string]any{
			"refused_session": shortSession(sess), "active_session": shortSession(wk.Session), "path": path,
			"refusals": count,
		})
		if err := s.Store.AppendAudit(ctx, rec); err != nil {
			s.Log.Warn("audit write failed", "action", rec.Action, "err", err)
		}
	}
	return web.Errorf(http.StatusConflict, protocol.CodeSessionActive,
		"worker %s (%s) is in use by another simpletuner-workerd (installation %s, heard from within the heartbeat timeout); "+
			"two workerd processes must not share a token: give this one its own worker, or stop the other one (this one may take over once that one is offline)",
		wk.ID, wk.Name, shortSession(wk.Session))
}

// shortSession is enough of an installation id to tell two apart in logs.
func shortSession(sess string) string {
	if len(sess) > 12 {
		return sess[:12]
	}
	return sess
}

// refusalLog remembers when the refusals of each worker were last logged,
// and counts those since.
type refusalLog struct {
	mu   sync.Mutex
	last map[string]refusals
}

type refusals struct {
	at    time.Time
	since int // refusals not logged since at
}

// due counts one refusal of key and reports whether it is to be logged now,
// with the refusals it stands for (itself and those not logged before it).
func (l *refusalLog) due(key string, now time.Time) (bool, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.last == nil {
		l.last = map[string]refusals{}
	}
	r, ok := l.last[key]
	if ok && now.Sub(r.at) <= sessionRefusalEvery {
		r.since++
		l.last[key] = r
		return false, 0
	}
	for k, old := range l.last { // keep the map small: forget old entries
		if now.Sub(old.at) > sessionRefusalEvery {
			delete(l.last, k)
		}
	}
	l.last[key] = refusals{at: now}
	return true, r.since + 1
}

// errSessionHeld is returned from inside a registration's transaction when
// another installation took the session meanwhile.
type errSessionHeld struct{ wk store.Worker }

func (e errSessionHeld) Error() string {
	return fmt.Sprintf("worker %s is held by installation %s", e.wk.ID, shortSession(e.wk.Session))
}
