package orchestrator_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/audit"
	"github.com/simpletuner/simpletuner-orchestration/internal/auth"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator"
	"github.com/simpletuner/simpletuner-orchestration/internal/store"
	"github.com/simpletuner/simpletuner-orchestration/internal/testutil"
)

// clientFrom is an HTTP client whose connections come from a loopback
// address of its own (127.0.0.n), so that one test can be several clients.
func clientFrom(n int) *http.Client {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, byte(n))}}
	return &http.Client{Transport: &http.Transport{DialContext: d.DialContext, MaxIdleConnsPerHost: 8}}
}

func auditCount(t *testing.T, st store.Store) (int, []audit.Record) {
	t.Helper()
	var all []audit.Record
	for since := int64(0); ; {
		recs, err := st.ListAudit(context.Background(), since, 1000)
		if err != nil {
			t.Fatal(err)
		}
		if len(recs) == 0 {
			return len(all), all
		}
		all = append(all, recs...)
		since = recs[len(recs)-1].Seq
	}
}

// An anonymous flood of bad tokens (well-formed ones with valid checksums
// included, which the limiter lets through to their lookup) from several
// clients writes one auth.failure record per client per interval, at most
// failure_audit_max_peers of them plus one summing up the rest, and every
// failure is counted in them: 300 failures from 5 clients over three
// intervals make at most 12 records. The test
// ends each interval itself (one flush after each round of requests), so
// how many failures an interval holds does not depend on the machine's
// speed; TestFailuresAreAuditedEachInterval covers the timer.
func TestAnonymousFloodDoesNotFloodTheAudit(t *testing.T) {
	t.Parallel()
	st := backends["sqlite"](t)
	const clients, maxPeers, rounds, perGoroutine = 5, 3, 3, 10
	e := setup(t, st, func(o *orchestrator.Options) {
		o.FailureAuditInterval = time.Hour // the test flushes
		o.FailureAuditMaxPeers = maxPeers
	})
	before, _ := auditCount(t, st)
	sent := 0
	for range rounds {
		var wg sync.WaitGroup
		for c := range clients {
			hc := clientFrom(2 + c)
			for range 2 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := range perGoroutine {
						floodRequest(t, hc, e.URL, i)
					}
				}()
			}
		}
		wg.Wait()
		sent += clients * 2 * perGoroutine
		e.srv.Authn().FlushFailures(t.Context())
	}
	_, all := auditCount(t, st)
	recs := all[before:]
	total := 0
	for _, r := range recs {
		if r.Action != "auth.failure" || r.Outcome != audit.Failure || r.Actor != "anonymous" {
			t.Fatalf("unexpected record %+v", r)
		}
		var d struct{ Failures int }
		_ = json.Unmarshal(r.Details, &d)
		total += d.Failures
	}
	t.Logf("flood: %d failed requests from %d clients over %d intervals wrote %d audit records", sent, clients, rounds, len(recs))
	if total != sent {
		t.Fatalf("the records count %d failures; %d were sent", total, sent)
	}
	if max := rounds * (maxPeers + 1); len(recs) > max {
		t.Fatalf("%d audit records for %d intervals; want at most %d (%d clients + 1 summary each)", len(recs), rounds, max, maxPeers)
	}
}

// floodRequest sends one request with a bad credential, of three kinds in
// turn, and checks it is refused.
func floodRequest(t *testing.T, hc *http.Client, url string, i int) {
	var req *http.Request
	switch i % 3 {
	case 0: // well-formed, valid checksum, unknown
		req, _ = http.NewRequest("POST", url+"/api/workers/register", strings.NewReader(`{"name":"x"}`))
		req.Header.Set("X-Worker-Token", auth.NewWorkerToken())
	case 1: // garbage
		req, _ = http.NewRequest("POST", url+"/api/workers/heartbeat", strings.NewReader(`{}`))
		req.Header.Set("X-Worker-Token", fmt.Sprintf("wt_guess%d", i))
	default: // a well-formed admin token nobody issued
		req, _ = http.NewRequest("GET", url+"/api/queue/j_x", nil)
		req.Header.Set("Authorization", "Bearer "+auth.NewAdminToken())
	}
	res, err := hc.Do(req)
	if err != nil {
		t.Error(err)
		return
	}
	res.Body.Close()
	if res.StatusCode != 401 && res.StatusCode != 429 {
		t.Errorf("a bad token got %d", res.StatusCode)
	}
}

// The failures of an interval reach the audit log when it ends, without a
// request to flush them.
func TestFailuresAreAuditedEachInterval(t *testing.T) {
	t.Parallel()
	st := backends["sqlite"](t)
	e := setup(t, st, func(o *orchestrator.Options) { o.FailureAuditInterval = 100 * time.Millisecond })
	before, _ := auditCount(t, st)
	hc := clientFrom(9)
	for i := range 3 {
		floodRequest(t, hc, e.URL, i)
	}
	testutil.Eventually(t, eventWait, "the failures audited by the timer", func() bool {
		_, all := auditCount(t, st)
		total := 0
		for _, r := range all[before:] {
			var d struct{ Failures int }
			_ = json.Unmarshal(r.Details, &d)
			total += d.Failures
		}
		return total == 3
	})
}

// A record says who, how often, where and with what (token accessors only).
func TestFailureRecordDetails(t *testing.T) {
	t.Parallel()
	st := backends["sqlite"](t)
	// No timed flush: on a loaded machine the four requests could straddle
	// one and be split over two records. The test flushes itself.
	e := setup(t, st, func(o *orchestrator.Options) { o.FailureAuditInterval = time.Hour })
	before, _ := auditCount(t, st)
	tok := auth.NewWorkerToken()
	for range 3 {
		e.Do("POST", "/api/workers/register", map[string]string{"X-Worker-Token": tok}, map[string]any{"name": "x"})
	}
	e.Do("POST", "/api/workers/job/j_abc/status", map[string]string{"X-Worker-Token": "nope"}, map[string]any{})
	e.srv.Authn().FlushFailures(t.Context())
	_, all := auditCount(t, st)
	if len(all) != before+1 {
		t.Fatalf("%d auth.failure records, want 1", len(all)-before)
	}
	rec := all[before]
	var d struct {
		Failures int
		Routes   map[string]int
		Tokens   []string
	}
	if err := json.Unmarshal(rec.Details, &d); err != nil {
		t.Fatal(err)
	}
	if rec.ActorIP != "127.0.0.1" || rec.TargetID != "127.0.0.1" || d.Failures != 4 ||
		d.Routes["POST /api/workers/register"] != 3 || d.Routes["POST /api/workers/job/:id/status"] != 1 || len(d.Tokens) != 2 {
		t.Fatalf("record %+v details %s", rec, rec.Details)
	}
	if strings.Contains(string(rec.Details), tok) {
		t.Fatal("the record holds a whole token")
	}
}
