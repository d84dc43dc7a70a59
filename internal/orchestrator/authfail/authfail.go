// Package authfail gathers failed authentications for the audit log.
// Failures come from strangers, as fast as they care to send them: each one
// is counted in memory, and the audit log gets one auth.failure record per
// client per interval with the count, so a flood of bad tokens costs a map
// update each, never a database write each.
package authfail

import (
	"cmp"
	"slices"
	"sync"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/audit"
	"github.com/simpletuner/simpletuner-orchestration/internal/auth"
	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
)

// Bounds of what one interval gathers: clients tracked (the failures of
// more are only counted), and routes and token accessors kept per client.
const (
	maxPeers  = 10_000
	maxRoutes = 8
	maxTokens = 5
)

// tally is one client's failures in the current interval.
type tally struct {
	key         string // the limiter key: an IPv4 address or an IPv6 /64
	ip          string // the first address seen, for the record's actor_ip
	count       int
	limited     int // of which answered 429
	first, last time.Time
	routes      map[string]int
	tokens      []string // accessors of the tokens tried, never more
}

// Gatherer counts failures until the next Records. Safe for concurrent use;
// the zero value is ready.
type Gatherer struct {
	mu    sync.Mutex
	peers map[string]*tally
	// untracked counts failures from clients past maxPeers.
	untracked int
}

// Note counts one failure from the client key (at address ip) on route,
// with token (only its accessor is kept); limited: it was answered 429.
func (g *Gatherer) Note(key, ip, route, token string, limited bool) {
	now := time.Now().UTC()
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.peers == nil {
		g.peers = map[string]*tally{}
	}
	t := g.peers[key]
	if t == nil {
		if len(g.peers) >= maxPeers {
			g.untracked++
			return
		}
		t = &tally{key: key, ip: ip, first: now, routes: map[string]int{}}
		g.peers[key] = t
	}
	t.count++
	t.last = now
	if limited {
		t.limited++
	}
	if _, ok := t.routes[route]; ok || len(t.routes) < maxRoutes {
		t.routes[route]++
	}
	if acc := accessor(token); len(t.tokens) < maxTokens && !slices.Contains(t.tokens, acc) {
		t.tokens = append(t.tokens, acc)
	}
}

// accessor names a token in the record without revealing it.
func accessor(token string) string {
	if token == "" {
		return "(none)"
	}
	return auth.Accessor(token)
}

// Records returns the interval's auth.failure records and starts a new
// interval: one per client, most failures first, at most maxRecords of them,
// and one more that sums up the clients past that (or past what one interval
// tracks). None when nothing failed.
func (g *Gatherer) Records(maxRecords int) []audit.Record {
	g.mu.Lock()
	peers, untracked := g.peers, g.untracked
	g.peers, g.untracked = nil, 0
	g.mu.Unlock()
	tallies := make([]*tally, 0, len(peers))
	for _, t := range peers {
		tallies = append(tallies, t)
	}
	slices.SortFunc(tallies, func(a, b *tally) int { return cmp.Or(b.count-a.count, cmp.Compare(a.key, b.key)) })

	maxRecords = max(maxRecords, 1)
	var recs []audit.Record
	restPeers, restFailures := 0, untracked
	for i, t := range tallies {
		if i >= maxRecords {
			restPeers++
			restFailures += t.count
			continue
		}
		recs = append(recs, audit.New("anonymous", t.ip, "auth.failure", "client", t.key, audit.Failure, map[string]any{
			"failures": t.count, "rate_limited": t.limited, "first": protocol.Time(t.first), "last": protocol.Time(t.last),
			"routes": t.routes, "tokens": t.tokens,
		}))
	}
	if restFailures > 0 {
		recs = append(recs, audit.New("anonymous", "", "auth.failure", "client", "(others)", audit.Failure, map[string]any{
			"failures": restFailures, "clients": restPeers,
			"note": "clients past the per-interval record limit (auth.failure_audit_max_peers) or past what one interval tracks",
		}))
	}
	return recs
}
