package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/pgtest"
	"github.com/simpletuner/simpletuner-orchestration/internal/store/sqlite"
	"github.com/simpletuner/simpletuner-orchestration/internal/testutil"
)

// The history scenario (-history N): a store holding N finished jobs, each
// with attempts, a log and audit records, generated in bulk SQL; then
//
//   - start-up to a ready /readyz on that store,
//   - p50/p99/max of every list, detail, stats and audit endpoint,
//   - submit → job_submit with idle workers, as on an empty store,
//   - (-retention) a retention pass deleting a third of the history while
//     200 workers heartbeat every second and jobs are submitted and
//     dispatched, measuring both, and the file's size before and after.

type endpointResult struct {
	name string
	d    dist
	note string
}

type historyResult struct {
	store      string
	gen        time.Duration
	startup    time.Duration
	endpoints  []endpointResult
	dispatch   dist
	verify     time.Duration
	verifyNote string
	fileBefore int64
	// Retention pass.
	ret retentionResult
	// loadBefore and loadAfter are /proc/loadavg's 1-minute figure.
	loadBefore, loadAfter string
}

type retentionResult struct {
	ran             bool
	pass            time.Duration
	deleted         string
	control, during loadDists
	fileBefore      int64
	fileAfter       int64
	errors          int64
}

func runHistory(f flags, name, bin, tmp string) (r historyResult, err error) {
	r.store = name
	dir, err := os.MkdirTemp(tmp, name+"-history-")
	if err != nil {
		return r, err
	}
	dbURL, dsn := "", filepath.Join(dir, "state", "orchestrator.db")
	if name == "postgres" {
		log.Printf("postgres: starting a throwaway cluster")
		u, stop, err := pgtest.StartCluster()
		if err != nil {
			return r, err
		}
		defer stop()
		dbURL, dsn = u, u
	}
	r.loadBefore = loadAvg()
	defer func() { r.loadAfter = loadAvg() }()
	// The daemon makes and migrates the database; the generator fills it.
	o, err := startOrch(bin, dir, dbURL, false)
	if err != nil {
		return r, err
	}
	o.stop()
	log.Printf("%s: generating %d finished jobs", name, f.history)
	start := time.Now()
	hs := histSpec{n: f.history, span: 30 * 24 * time.Hour, now: time.Now()}
	if err := generate(context.Background(), name, dsn, hs); err != nil {
		return r, fmt.Errorf("generating the history: %w", err)
	}
	r.gen = time.Since(start)
	if name == "sqlite" {
		r.fileBefore = sqlite.FileBytes(dsn)
		log.Printf("sqlite: database file %s", mib(r.fileBefore))
	}
	retentionOff := ""
	if f.newBinary {
		// Measure reads without a retention pass running beside them.
		retentionOff = "[retention]\njobs = \"0\"\nlogs = \"0\"\nartifacts = \"0\"\naudit = \"0\"\n"
	}
	o, err = startOrchWith(bin, dir, dbURL, false, retentionOff)
	if err != nil {
		return r, err
	}
	r.startup = o.startup
	log.Printf("%s: start-up to ready %s", name, r.startup.Round(time.Millisecond))
	c := newClient(o)
	ctx, cancel := context.WithCancel(context.Background())
	ws, err := c.createWorkers(ctx, 0, f.cycleWorkers, f.createPar)
	if err == nil {
		err = connectAll(ctx, ws, f.connectPar)
	}
	if err != nil {
		cancel()
		o.stop()
		return r, err
	}
	if f.skipReads {
		cancel()
		o.stop()
		r.ret, err = retentionUnderLoad(f, name, bin, dir, dbURL, dsn)
		return r, err
	}
	r.endpoints = measureEndpoints(ctx, c, f, hs)
	if r.dispatch, err = c.latency(ctx, f.samples, 2*time.Minute); err != nil {
		cancel()
		o.stop()
		return r, err
	}
	log.Printf("%s: submit→job_submit p50/p90/p99/max %s", name, r.dispatch)
	if f.newBinary {
		t := time.Now()
		body, code, _ := c.get(ctx, "/api/admin/audit/verify")
		r.verify = time.Since(t)
		r.verifyNote = fmt.Sprintf("HTTP %d %.120s", code, strings.TrimSpace(body))
		log.Printf("%s: audit verify %s: %s", name, r.verify.Round(time.Millisecond), r.verifyNote)
	}
	cancel()
	o.stop()
	if f.retention && f.newBinary {
		if r.ret, err = retentionUnderLoad(f, name, bin, dir, dbURL, dsn); err != nil {
			return r, err
		}
	}
	return r, nil
}

// get fetches path with the admin token and returns the body and status.
func (c *client) get(ctx context.Context, path string) (string, int, error) {
	req, err := http.NewRequestWithContext(ctx, "GET", c.o.url+path, nil)
	if err != nil {
		return "", 0, err
	}
	req.Header.Set("Authorization", "Bearer "+c.o.admin)
	res, err := c.api.Do(req)
	if err != nil {
		return "", 0, err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	return string(b), res.StatusCode, err
}

// warmup requests of each endpoint are made and not counted: the first ones
// prepare statements and read cold pages.
const warmup = 10

// timeGet times n GETs of the paths next() gives, sequentially, after warmup
// uncounted ones; a non-200 answer is an error.
func timeGet(ctx context.Context, c *client, n int, next func(i int) string) (dist, error) {
	var out []time.Duration
	for i := range n + warmup {
		p := next(i)
		t := time.Now()
		body, code, err := c.get(ctx, p)
		d := time.Since(t)
		if err != nil {
			return dist{}, err
		}
		if code != 200 {
			return dist{}, fmt.Errorf("GET %s: HTTP %d: %.200s", p, code, body)
		}
		if i >= warmup {
			out = append(out, d)
		}
	}
	return summarize(out), nil
}

func measureEndpoints(ctx context.Context, c *client, f flags, hs histSpec) []endpointResult {
	n := f.historySamples
	randJob := func(int) string { return histJob(1 + rand.IntN(hs.n)) }
	cases := []struct {
		name string
		path func(i int) string
	}{
		{"GET /api/queue?limit=50", func(int) string { return "/api/queue?limit=50" }},
		{"GET /api/queue?status=completed&limit=50", func(int) string { return "/api/queue?status=completed&limit=50" }},
		{"GET /api/queue?status=failed&limit=50", func(int) string { return "/api/queue?status=failed&limit=50" }},
		{"GET /api/queue?status=queued", func(int) string { return "/api/queue?status=queued" }},
		{"GET /api/queue?status=active", func(int) string { return "/api/queue?status=active" }},
		{"GET /api/queue?worker_id=W&limit=50", func(i int) string {
			return "/api/queue?limit=50&worker_id=" + histWorker(i%histWorkers)
		}},
		{"GET /api/queue?limit=50&offset=1000", func(int) string { return "/api/queue?limit=50&offset=1000" }},
		{"GET /api/queue/stats", func(int) string { return "/api/queue/stats" }},
		{"GET /api/queue/{id}", func(i int) string { return "/api/queue/" + randJob(i) }},
		{"GET /api/queue/{id}/logs", func(i int) string { return "/api/queue/" + randJob(i) + "/logs" }},
		{"GET /api/admin/workers", func(int) string { return "/api/admin/workers" }},
		{"GET /api/admin/audit?limit=100 (oldest)", func(int) string { return "/api/admin/audit?limit=100" }},
		{"GET /api/admin/audit?since=S&limit=100", func(int) string {
			return fmt.Sprintf("/api/admin/audit?limit=100&since=%d", rand.IntN(3*hs.n))
		}},
	}
	var out []endpointResult
	for _, cs := range cases {
		d, err := timeGet(ctx, c, n, cs.path)
		note := ""
		if err != nil {
			note = err.Error()
		}
		log.Printf("  %-45s %s %s", cs.name, d, note)
		out = append(out, endpointResult{name: cs.name, d: d, note: note})
	}
	// Following the next cursor from the newest job back, 20 pages a walk.
	var cursor string
	var pages []time.Duration
	note := ""
	for len(pages) < n && note == "" {
		p := "/api/queue?limit=50"
		if cursor != "" && len(pages)%20 != 0 {
			p += "&cursor=" + url.QueryEscape(cursor)
		}
		t := time.Now()
		body, code, err := c.get(ctx, p)
		d := time.Since(t)
		var reply struct {
			Next string `json:"next"`
		}
		switch {
		case err != nil:
			note = err.Error()
		case code != 200:
			note = fmt.Sprintf("HTTP %d", code)
		case json.Unmarshal([]byte(body), &reply) != nil || reply.Next == "":
			note = "no next cursor in the reply"
		}
		if note == "" {
			pages = append(pages, d)
			cursor = reply.Next
		}
	}
	d := summarize(pages)
	log.Printf("  %-45s %s %s", "GET /api/queue?limit=50&cursor=C", d, note)
	out = append(out, endpointResult{name: "GET /api/queue?limit=50&cursor=C (20 pages deep)", d: d, note: note})
	return out
}

// retentionUnderLoad restarts the orchestrator with retention deleting the
// oldest third of the history and measures heartbeats, dispatch and a list
// under the same load twice: for a control window before the pass starts,
// and while it runs. The machine may be shared: the control says what the
// load alone costs.
func retentionUnderLoad(f flags, name, bin, dir, dbURL, dsn string) (retentionResult, error) {
	var r retentionResult
	r.ran = true
	if name == "sqlite" {
		r.fileBefore = sqlite.FileBytes(dsn)
	}
	mport, err := testutil.FreePort()
	if err != nil {
		return r, err
	}
	murl := fmt.Sprintf("http://127.0.0.1:%d/metrics", mport)
	// The history ended over the last 30 days: jobs older than 20 days go
	// (their logs and audit records with them), and the logs of those
	// older than 10 days. The first pass waits for the start-up grace: the
	// control window runs meanwhile.
	extra := fmt.Sprintf(`[metrics]
listen = "127.0.0.1:%d"
[workers]
heartbeat_interval = "1s"
startup_grace = "%s"
[retention]
jobs = "480h"
logs = "240h"
artifacts = "240h"
audit = "480h"
`, mport, f.controlWindow+30*time.Second)
	o, err := startOrchWith(bin, dir, dbURL, false, extra)
	if err != nil {
		return r, err
	}
	defer o.stop()
	c := newClient(o)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ws, err := c.createWorkers(ctx, 1000, f.retentionWorkers, f.createPar)
	if err == nil {
		err = connectAll(ctx, ws, f.connectPar)
	}
	if err != nil {
		return r, err
	}
	passes := func() (running, done float64) {
		m := scrape(murl)
		return m["simpletuner_retention_running"], m["simpletuner_retention_passes_total"]
	}
	log.Printf("%s: %d workers heartbeating every second; control window of %s before the pass", name, len(ws), f.controlWindow)
	stop := make(chan struct{})
	time.AfterFunc(f.controlWindow, func() { close(stop) })
	if r.control, err = c.underLoad(ctx, stop); err != nil {
		return r, err
	}
	if running, done := passes(); running > 0 || done > 0 {
		return r, fmt.Errorf("the retention pass started during the control window")
	}
	log.Printf("%s: control: heartbeat %s; dispatch %s; list %s", name, r.control.heartbeat, r.control.dispatch, r.control.list)
	deadline := time.Now().Add(5 * time.Minute)
	for {
		running, done := passes()
		if running > 0 || done > 0 {
			break
		}
		if time.Now().After(deadline) {
			return r, fmt.Errorf("no retention pass started")
		}
		time.Sleep(20 * time.Millisecond)
	}
	start := time.Now()
	stop = make(chan struct{})
	ended := make(chan struct{})
	go func() {
		defer close(stop)
		for {
			select {
			case <-ended:
				return
			case <-time.After(100 * time.Millisecond):
			}
			if running, done := passes(); running == 0 && done > 0 {
				return
			}
			if time.Since(start) > 60*time.Minute {
				return
			}
		}
	}()
	r.during, err = c.underLoad(ctx, stop)
	close(ended)
	if err != nil {
		return r, err
	}
	r.pass = time.Since(start)
	m := scrape(murl)
	if m["simpletuner_retention_passes_total"] < 1 {
		return r, fmt.Errorf("retention pass still running after an hour")
	}
	r.deleted = fmt.Sprintf("jobs %.0f, logs %.0f, artifacts %.0f, audit %.0f",
		m[`simpletuner_retention_deleted_total{kind="jobs"}`], m[`simpletuner_retention_deleted_total{kind="logs"}`],
		m[`simpletuner_retention_deleted_total{kind="artifacts"}`], m[`simpletuner_retention_deleted_total{kind="audit"}`])
	if name == "sqlite" {
		r.fileAfter = sqlite.FileBytes(dsn)
	}
	r.errors = c.errors.Load()
	log.Printf("%s: retention pass %s deleted %s; heartbeat %s; dispatch %s; list %s; file %s → %s",
		name, r.pass.Round(time.Millisecond), r.deleted, r.during.heartbeat, r.during.dispatch, r.during.list, mib(r.fileBefore), mib(r.fileAfter))
	return r, nil
}

// loadDists are the latencies measured under the retention phase's load.
type loadDists struct{ heartbeat, dispatch, list dist }

// underLoad collects heartbeat round trips, submits jobs one at a time
// (submit → job_submit) and reads a list page every 100 ms, until stop closes.
func (c *client) underLoad(ctx context.Context, stop <-chan struct{}) (loadDists, error) {
	var out loadDists
	c.hbMu.Lock()
	c.hb = c.hb[:0]
	c.hbMu.Unlock()
	c.hbOn.Store(true)
	var wg sync.WaitGroup
	var listLat []time.Duration
	var listErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
			t := time.Now()
			_, code, err := c.get(ctx, "/api/queue?limit=50")
			if err == nil && code != 200 {
				err = fmt.Errorf("HTTP %d", code)
			}
			if err != nil {
				listErr = err
				return
			}
			listLat = append(listLat, time.Since(t))
		}
	}()
	var dispatch []time.Duration
	var dispErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := c.latency(ctx, 10, time.Minute); err != nil {
				dispErr = err
				return
			}
			dispatch = append(dispatch, c.lastLatencies...)
		}
	}()
	wg.Wait()
	c.hbOn.Store(false)
	c.hbMu.Lock()
	out.heartbeat = summarize(append([]time.Duration(nil), c.hb...))
	c.hbMu.Unlock()
	out.dispatch, out.list = summarize(dispatch), summarize(listLat)
	return out, errors.Join(dispErr, listErr)
}

// scrape reads a Prometheus text page into name{labels} → value.
func scrape(u string) map[string]float64 {
	out := map[string]float64{}
	res, err := http.Get(u)
	if err != nil {
		return out
	}
	defer res.Body.Close()
	sc := bufio.NewScanner(res.Body)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err == nil {
			out[line[:i]] = v
		}
	}
	return out
}

func printHistory(f flags, rs []historyResult) {
	b := newResultTable("measurement", rs, func(r historyResult) string { return r.store })
	row := b.row
	row("history generated (bulk SQL)", "—", func(r historyResult) string { return r.gen.Round(time.Second).String() })
	row("database file (SQLite)", "—", func(r historyResult) string {
		if r.fileBefore == 0 {
			return "—"
		}
		return mib(r.fileBefore)
	})
	row("start-up to ready", "< 2 s", func(r historyResult) string { return r.startup.Round(time.Millisecond).String() })
	if len(rs) > 0 {
		for i := range rs[0].endpoints {
			name := rs[0].endpoints[i].name
			row(name+", p50 / p90 / p99 / max", "p99 < 10 ms", func(r historyResult) string {
				e := r.endpoints[i]
				if e.note != "" && e.d.n == 0 {
					return e.note
				}
				return e.d.String()
			})
		}
	}
	row(fmt.Sprintf("submit → job_submit, %d idle workers, p50 / p90 / p99 / max", f.cycleWorkers), "p99 < 50 ms",
		func(r historyResult) string { return r.dispatch.String() })
	row("GET /api/admin/audit/verify (whole chain, once)", "—", func(r historyResult) string {
		if r.verify == 0 {
			return "—"
		}
		return r.verify.Round(time.Millisecond).String()
	})
	if f.retention && f.newBinary {
		row("retention pass: time", "—", func(r historyResult) string { return r.ret.pass.Round(time.Millisecond).String() })
		row("retention pass: rows deleted", "—", func(r historyResult) string { return r.ret.deleted })
		row(fmt.Sprintf("heartbeat round trip, %d workers beating every 1 s: %s before the pass (control) / during it", f.retentionWorkers, f.controlWindow),
			"p99 < 100 ms", func(r historyResult) string {
				return r.ret.control.heartbeat.String() + " / " + r.ret.during.heartbeat.String()
			})
		row("submit → job_submit, control / during the pass", "p99 < 50 ms",
			func(r historyResult) string {
				return r.ret.control.dispatch.String() + " / " + r.ret.during.dispatch.String()
			})
		row("GET /api/queue?limit=50 every 100 ms, control / during the pass", "—",
			func(r historyResult) string { return r.ret.control.list.String() + " / " + r.ret.during.list.String() })
		row("database file before → after the pass (SQLite)", "—", func(r historyResult) string {
			if r.ret.fileBefore == 0 {
				return "—"
			}
			return mib(r.ret.fileBefore) + " → " + mib(r.ret.fileAfter)
		})
		row("request errors seen by simulated workers", "0", func(r historyResult) string { return fmt.Sprint(r.ret.errors) })
	}
	row("1-minute load average before / after (2 CPUs)", "—", func(r historyResult) string { return r.loadBefore + " / " + r.loadAfter })
	fmt.Printf("\nsimpletuner-orchestratord history benchmark, %s, %s, %d CPUs, %s\n\n%s",
		time.Now().UTC().Format("2006-01-02 15:04 UTC"), runtime.Version(), runtime.NumCPU(), strings.Join(os.Args[1:], " "), b.String())
}
