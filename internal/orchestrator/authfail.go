package orchestrator

import (
	"cmp"
	"context"
	"slices"
	"sync"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/audit"
	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
)

// Failed authentications come from strangers, as fast as they care to send
// them. Each one is counted here, in memory, and the audit log gets one
// auth.failure record per client per interval with the count: a flood of
// bad tokens costs a map update each, never a database write each.

// Bounds of what one interval gathers: clients tracked (the failures of
// more are only counted), and routes and token accessors kept per client.
const (
	maxFailurePeers  = 10_000
	maxFailureRoutes = 8
	maxFailureTokens = 5
)

// failureTally is one client's failures in the current interval.
type failureTally struct {
	key         string // the limiter key: an IPv4 address or an IPv6 /64
	ip          string // the first address seen, for the record's actor_ip
	count       int
	limited     int // of which answered 429
	first, last time.Time
	routes      map[string]int
	tokens      []string // accessors of the tokens tried, never more
}

// failureAudit gathers failures until the next flush.
type failureAudit struct {
	mu    sync.Mutex
	peers map[string]*failureTally
	// untracked counts failures from clients past maxFailurePeers.
	untracked int
}

// note counts one failure from the client key (at address ip) on route.
func (f *failureAudit) note(key, ip, route, token string, limited bool) {
	now := time.Now().UTC()
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.peers == nil {
		f.peers = map[string]*failureTally{}
	}
	t := f.peers[key]
	if t == nil {
		if len(f.peers) >= maxFailurePeers {
			f.untracked++
			return
		}
		t = &failureTally{key: key, ip: ip, first: now, routes: map[string]int{}}
		f.peers[key] = t
	}
	t.count++
	t.last = now
	if limited {
		t.limited++
	}
	if _, ok := t.routes[route]; ok || len(t.routes) < maxFailureRoutes {
		t.routes[route]++
	}
	if acc := tokenAccessor(token); len(t.tokens) < maxFailureTokens && !slices.Contains(t.tokens, acc) {
		t.tokens = append(t.tokens, acc)
	}
}

// take returns what was gathered, most failures first, and starts afresh.
func (f *failureAudit) take() ([]*failureTally, int) {
	f.mu.Lock()
	peers, untracked := f.peers, f.untracked
	f.peers, f.untracked = nil, 0
	f.mu.Unlock()
	out := make([]*failureTally, 0, len(peers))
	for _, t := range peers {
		out = append(out, t)
	}
	slices.SortFunc(out, func(a, b *failureTally) int { return cmp.Or(b.count-a.count, cmp.Compare(a.key, b.key)) })
	return out, untracked
}

// flushFailureAudit writes the interval's auth.failure records: one per
// client, at most FailureAuditMaxPeers of them, and one more that sums up
// the clients past that.
func (s *Server) flushFailureAudit(ctx context.Context) {
	tallies, untracked := s.failures.take()
	if len(tallies) == 0 && untracked == 0 {
		return
	}
	limit := max(s.options().FailureAuditMaxPeers, 1)
	var rest struct{ peers, failures int }
	rest.failures = untracked
	for i, t := range tallies {
		if i >= limit {
			rest.peers++
			rest.failures += t.count
			continue
		}
		rec := audit.New("anonymous", t.ip, "auth.failure", "client", t.key, audit.Failure, map[string]any{
			"failures": t.count, "rate_limited": t.limited, "first": protocol.Time(t.first), "last": protocol.Time(t.last),
			"routes": t.routes, "tokens": t.tokens,
		})
		if err := s.store.AppendAudit(ctx, rec); err != nil {
			s.log.Warn("audit write failed", "action", "auth.failure", "err", err)
			return
		}
	}
	if rest.failures > 0 {
		rec := audit.New("anonymous", "", "auth.failure", "client", "(others)", audit.Failure, map[string]any{
			"failures": rest.failures, "clients": rest.peers,
			"note": "clients past the per-interval record limit (auth.failure_audit_max_peers) or past what one interval tracks",
		})
		if err := s.store.AppendAudit(ctx, rec); err != nil {
			s.log.Warn("audit write failed", "action", "auth.failure", "err", err)
		}
	}
}

// runFailureAudit flushes every FailureAuditInterval, and once more when ctx ends.
func (s *Server) runFailureAudit(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			bg, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			s.flushFailureAudit(bg)
			cancel()
			return
		case <-time.After(s.options().FailureAuditInterval):
			s.flushFailureAudit(ctx)
		}
	}
}
