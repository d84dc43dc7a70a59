package main

// The dashboard measurement: a store filled with a large fleet and a long
// history, the real binary serving it, and a signed-in client that times the
// overview and worker pages and then polls their live parts the way an open
// browser tab does, while the orchestrator's CPU time is read from /proc.

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/pgtest"
	"github.com/simpletuner/simpletuner-orchestration/internal/store/postgres"
	"github.com/simpletuner/simpletuner-orchestration/internal/store/sqlite"
)

type dashResult struct {
	store                     string
	workers, jobs             int
	fill                      time.Duration
	overview, workersPage     dist
	liveOverview, liveWorkers dist
	window                    time.Duration
	// Orchestrator CPU seconds over the window: nobody watching, then one tab
	// polling the overview, then one tab polling the worker page; and the same
	// for PostgreSQL's processes (zero on SQLite, which runs inside the orchestrator).
	idleCPU, overviewCPU, workersCPU float64
	idlePG, overviewPG, workersPG    float64
	// CPU seconds (orchestrator + PostgreSQL) per live update, from a burst of
	// back-to-back requests less the idle rate: the minute-long windows above
	// are dominated by the orchestrator's own background work.
	perOverview, perWorkers float64
	// The 1-minute load average before and after: other work on the machine skews the numbers.
	loadBefore, loadAfter string
}

// dashboardPoll is how often an open page refreshes its live part (the
// dashboard's default).
const dashboardPoll = 5 * time.Second

func runDashboard(f flags, name, bin, tmp string) (r dashResult, err error) {
	r.store, r.workers, r.jobs, r.window = name, f.dashWorkers, f.dashJobs, f.dashWindow
	r.loadBefore = loadAvg()
	defer func() { r.loadAfter = loadAvg() }()
	dir, err := os.MkdirTemp(tmp, name+"-dashboard-")
	if err != nil {
		return r, err
	}
	dbURL := ""
	if name == "postgres" {
		u, stop, err := pgtest.StartCluster()
		if err != nil {
			return r, err
		}
		defer stop()
		dbURL = u
		if pu, err := url.Parse(u); err == nil {
			postmaster = findPostmaster(pu.Port())
			defer func() { postmaster = 0 }()
		}
		if postmaster == 0 {
			log.Printf("postgres dashboard: cannot find the cluster's postmaster; counting every postgres process")
		}
	}
	log.Printf("%s dashboard: filling the store with %d workers and %d finished jobs", name, f.dashWorkers, f.dashJobs)
	start := time.Now()
	if err := fillStore(name, dbURL, filepath.Join(dir, "state", "orchestrator.db"), f.dashWorkers, f.dashJobs); err != nil {
		return r, fmt.Errorf("filling the store: %w", err)
	}
	r.fill = time.Since(start)
	log.Printf("%s dashboard: filled in %s; starting the orchestrator", name, r.fill.Round(time.Millisecond))
	o, err := startOrch(bin, dir, dbURL, false)
	if err != nil {
		return r, err
	}
	defer o.stop()
	web, err := signIn(o)
	if err != nil {
		return r, err
	}
	get := func(path string, live bool) (time.Duration, error) {
		req, _ := http.NewRequest("GET", o.url+path, nil)
		if live {
			req.Header.Set("HX-Request", "true")
		}
		t0 := time.Now()
		res, err := web.Do(req)
		if err != nil {
			return 0, err
		}
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		d := time.Since(t0)
		if res.StatusCode != 200 {
			return 0, fmt.Errorf("GET %s: HTTP %d", path, res.StatusCode)
		}
		return d, nil
	}
	for _, m := range []struct {
		path string
		live bool
		out  *dist
	}{
		{"/ui/", false, &r.overview}, {"/ui/workers", false, &r.workersPage},
		{"/ui/live/overview", true, &r.liveOverview}, {"/ui/live/workers?page=1", true, &r.liveWorkers},
	} {
		var ds []time.Duration
		if _, err := get(m.path, m.live); err != nil { // warm up
			return r, err
		}
		for range f.dashSamples {
			d, err := get(m.path, m.live)
			if err != nil {
				return r, err
			}
			ds = append(ds, d)
		}
		*m.out = summarize(ds)
		log.Printf("%s dashboard: GET %s p50/p90/p99/max %s", name, m.path, *m.out)
	}

	pid := o.cmd.Process.Pid
	idleRate := func() float64 { // CPU seconds per second with nobody watching
		before, t0 := sampleCPU(pid), time.Now()
		time.Sleep(10 * time.Second)
		after := sampleCPU(pid)
		return (after.orch - before.orch + r.pgOnly(after.postgres-before.postgres)) / time.Since(t0).Seconds()
	}
	perRequest := func(path string, idle float64) (float64, error) {
		const n = 200
		before, t0 := sampleCPU(pid), time.Now()
		for range n {
			if _, err := get(path, true); err != nil {
				return 0, err
			}
		}
		after := sampleCPU(pid)
		used := after.orch - before.orch + r.pgOnly(after.postgres-before.postgres)
		return max(0, used-idle*time.Since(t0).Seconds()) / n, nil
	}
	idle := idleRate()
	if r.perOverview, err = perRequest("/ui/live/overview", idle); err != nil {
		return r, err
	}
	if r.perWorkers, err = perRequest("/ui/live/workers?page=1", idle); err != nil {
		return r, err
	}
	log.Printf("%s dashboard: CPU per live update: overview %.1f ms, workers %.1f ms (idle rate %.3f)", name, 1000*r.perOverview, 1000*r.perWorkers, idle)
	cpuOver := func(poll string) (orchCPU, pgCPU float64, err error) {
		before := sampleCPU(pid)
		end := time.Now().Add(f.dashWindow)
		for time.Now().Before(end) {
			if poll != "" {
				if _, err := get(poll, true); err != nil {
					return 0, 0, err
				}
			}
			time.Sleep(min(dashboardPoll, time.Until(end)))
		}
		after := sampleCPU(pid)
		return after.orch - before.orch, after.postgres - before.postgres, nil
	}
	log.Printf("%s dashboard: orchestrator CPU over %s with no dashboard open", name, f.dashWindow)
	if r.idleCPU, r.idlePG, err = cpuOver(""); err != nil {
		return r, err
	}
	log.Printf("%s dashboard: … with one overview tab polling every %s", name, dashboardPoll)
	if r.overviewCPU, r.overviewPG, err = cpuOver("/ui/live/overview"); err != nil {
		return r, err
	}
	log.Printf("%s dashboard: … with one worker-page tab polling every %s", name, dashboardPoll)
	if r.workersCPU, r.workersPG, err = cpuOver("/ui/live/workers?page=1"); err != nil {
		return r, err
	}
	log.Printf("%s dashboard: orchestrator CPU idle %.2f s, overview %.2f s, workers %.2f s; postgres %.2f / %.2f / %.2f s",
		name, r.idleCPU, r.overviewCPU, r.workersCPU, r.idlePG, r.overviewPG, r.workersPG)
	return r, nil
}

var formToken = regexp.MustCompile(`name="form_token" value="([^"]+)"`)

// signIn signs in to the dashboard with the admin token, as a browser would.
func signIn(o *orch) (*http.Client, error) {
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar, Timeout: 60 * time.Second}
	res, err := c.Get(o.url + "/ui/signin")
	if err != nil {
		return nil, err
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	m := formToken.FindSubmatch(body)
	if m == nil {
		return nil, fmt.Errorf("no sign-in form (HTTP %d)", res.StatusCode)
	}
	req, _ := http.NewRequest("POST", o.url+"/ui/signin", strings.NewReader(url.Values{
		"form_token": {string(m[1])}, "token": {o.admin}, "next": {"/ui/"}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", o.url)
	res, err = c.Do(req)
	if err != nil {
		return nil, err
	}
	res.Body.Close()
	if res.StatusCode != 200 || res.Request.URL.Path != "/ui/" {
		return nil, fmt.Errorf("sign-in ended at %s with HTTP %d", res.Request.URL, res.StatusCode)
	}
	return c, nil
}

// fillStore writes the fleet and the history straight into a migrated
// database, generated by the engine itself (going through the API would take
// hours). Workers are persistent and offline (no stream is open, so that is
// what the health loop would make of them anyway); jobs ended over the last
// 30 days: 90 % completed, 7 % failed, 3 % cancelled.
func fillStore(engine, dbURL, sqlitePath string, workers, jobs int) error {
	ctx := context.Background()
	var db *sql.DB
	var stmts []string
	nowMicros := time.Now().UnixMicro()
	const month = int64(30 * 24 * time.Hour / time.Microsecond)
	if engine == "sqlite" {
		st, err := sqlite.Open(ctx, sqlitePath, nil)
		if err != nil {
			return err
		}
		defer st.Close()
		db = st.DB()
		stmts = []string{
			fmt.Sprintf(`WITH RECURSIVE c(n) AS (SELECT 0 UNION ALL SELECT n + 1 FROM c WHERE n + 1 < %d)
INSERT INTO workers (id, name, type, status, gpu_info, labels, admin_labels, persistent, protocol, agent_version,
  last_heartbeat, created_at, created_by, token_hash)
SELECT printf('w_bench%%06d', n), printf('gpu-%%05d', n), 'persistent', 'offline',
  CASE n %% 3 WHEN 0 THEN '{"name":"NVIDIA A100-SXM4-80GB","count":8,"vram_gb":80}'
              WHEN 1 THEN '{"name":"NVIDIA H100 80GB HBM3","count":4,"vram_gb":80}'
              ELSE '{"name":"NVIDIA L40S","count":2,"vram_gb":48}' END,
  printf('{"pool":"p%%d","zone":"z%%d"}', n %% 10, n %% 4), '{}', 1, 2, 'bench',
  %d - n * 1000000, %d - %d, 'admin:bench', printf('bench-token-%%06d', n) FROM c`, workers, nowMicros, nowMicros, month),
			fmt.Sprintf(`WITH RECURSIVE c(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM c WHERE n < %d)
INSERT INTO jobs (id, seq, config_name, config, target, status, attempt, worker_id, submitted_by, max_retries,
  created_at, updated_at, started_at, ended_at)
SELECT printf('j_bench%%07d', n), n, 'bench-config', '{"steps":1}', 'auto',
  CASE WHEN n %% 100 < 90 THEN 'completed' WHEN n %% 100 < 97 THEN 'failed' ELSE 'cancelled' END,
  1, printf('w_bench%%06d', n %% %d), 'admin:bench', 3,
  %d - (%d - n) * %d / %d - 60000000, %d - (%d - n) * %d / %d, %d - (%d - n) * %d / %d - 50000000, %d - (%d - n) * %d / %d
FROM c`, jobs, max(workers, 1),
				nowMicros, jobs, month, jobs, nowMicros, jobs, month, jobs, nowMicros, jobs, month, jobs, nowMicros, jobs, month, jobs),
		}
	} else {
		st, err := postgres.Open(ctx, dbURL, nil)
		if err != nil {
			return err
		}
		defer st.Close()
		db = st.DB()
		stmts = []string{
			fmt.Sprintf(`INSERT INTO workers (id, name, type, status, gpu_info, labels, admin_labels, persistent, protocol,
  agent_version, last_heartbeat, created_at, created_by, token_hash)
SELECT format('w_bench%%s', lpad(n::text, 6, '0')), format('gpu-%%s', lpad(n::text, 5, '0')), 'persistent', 'offline',
  (CASE n %% 3 WHEN 0 THEN '{"name":"NVIDIA A100-SXM4-80GB","count":8,"vram_gb":80}'
               WHEN 1 THEN '{"name":"NVIDIA H100 80GB HBM3","count":4,"vram_gb":80}'
               ELSE '{"name":"NVIDIA L40S","count":2,"vram_gb":48}' END)::json,
  format('{"pool":"p%%s","zone":"z%%s"}', n %% 10, n %% 4)::jsonb, '{}', true, 2, 'bench',
  now() - n * interval '1 second', now() - interval '30 days', 'admin:bench', format('bench-token-%%s', n)
FROM generate_series(0, %d - 1) AS n`, workers),
			fmt.Sprintf(`INSERT INTO jobs (id, seq, config_name, config, target, status, attempt, worker_id, submitted_by,
  max_retries, created_at, updated_at, started_at, ended_at)
SELECT format('j_bench%%s', lpad(n::text, 7, '0')), n, 'bench-config', '{"steps":1}', 'auto',
  CASE WHEN n %% 100 < 90 THEN 'completed' WHEN n %% 100 < 97 THEN 'failed' ELSE 'cancelled' END,
  1, format('w_bench%%s', lpad((n %% %d)::text, 6, '0')), 'admin:bench', 3,
  t - interval '60 seconds', t, t - interval '50 seconds', t
FROM (SELECT n, now() - (%d - n) * (interval '30 days' / %d) AS t FROM generate_series(1, %d) AS n) s`,
				max(workers, 1), jobs, jobs, jobs),
			`SELECT setval('jobs_seq_seq', (SELECT max(seq) FROM jobs))`,
			`ANALYZE`,
		}
	}
	for _, q := range stmts {
		if _, err := db.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("%v\n%s", err, q)
		}
	}
	return nil
}

// pgOnly keeps PostgreSQL's CPU for the PostgreSQL store; on SQLite any
// postgres process on the machine is someone else's.
func (r dashResult) pgOnly(v float64) float64 {
	if r.store != "postgres" {
		return 0
	}
	return v
}

func printDashboard(rs []dashResult) {
	if len(rs) == 0 {
		return
	}
	b := newResultTable(fmt.Sprintf("dashboard, %d workers and %d finished jobs in the store", rs[0].workers, rs[0].jobs),
		rs, func(r dashResult) string { return r.store })
	row := b.row
	row("GET /ui/ (overview page), p50 / p90 / p99 / max", "< 50 ms", func(r dashResult) string { return r.overview.String() })
	row("GET /ui/workers (first page, 25 rows), p50 / p90 / p99 / max", "< 50 ms", func(r dashResult) string { return r.workersPage.String() })
	row("GET /ui/live/overview (the overview's 5 s update)", "—", func(r dashResult) string { return r.liveOverview.String() })
	row("GET /ui/live/workers (the worker page's 5 s update)", "—", func(r dashResult) string { return r.liveWorkers.String() })
	pct := func(extra float64, w time.Duration) string {
		return fmt.Sprintf("%.2f %% of a core", 100*extra/w.Seconds())
	}
	row("orchestrator CPU, no dashboard open (postgres processes)", "—", func(r dashResult) string {
		return fmt.Sprintf("%.2f s in %s (%.2f s)", r.idleCPU, r.window, r.pgOnly(r.idlePG))
	})
	extra := func(orch, orchIdle, pg, pgIdle float64, w time.Duration) string {
		s := fmt.Sprintf("orchestrator %.2f s in %s = %s", orch-orchIdle, w, pct(orch-orchIdle, w))
		if pg != 0 || pgIdle != 0 {
			s += fmt.Sprintf("; postgres %.2f s = %s", pg-pgIdle, pct(pg-pgIdle, w))
		}
		return s
	}
	row("one open overview tab (CPU above idle)", "≤ 1 % of a core", func(r dashResult) string {
		return extra(r.overviewCPU, r.idleCPU, r.pgOnly(r.overviewPG), r.pgOnly(r.idlePG), r.window)
	})
	row("one open worker-page tab (CPU above idle)", "≤ 1 % of a core", func(r dashResult) string {
		return extra(r.workersCPU, r.idleCPU, r.pgOnly(r.workersPG), r.pgOnly(r.idlePG), r.window)
	})
	perTab := func(perPoll float64) string {
		return fmt.Sprintf("%.1f ms per update × 12 a minute = %.2f %% of a core", 1000*perPoll, 100*perPoll/dashboardPoll.Seconds())
	}
	row("CPU per live update of the overview (orchestrator + postgres, 200 back to back, less idle)", "≤ 1 % of a core per tab",
		func(r dashResult) string { return perTab(r.perOverview) })
	row("CPU per live update of the worker page (same)", "≤ 1 % of a core per tab",
		func(r dashResult) string { return perTab(r.perWorkers) })
	row("filling the store (not a dashboard cost)", "—", func(r dashResult) string { return r.fill.Round(time.Second).String() })
	row("1-minute load average before / after (2 CPUs)", "—", func(r dashResult) string { return r.loadBefore + " / " + r.loadAfter })
	fmt.Printf("\n%s", b.String())
}
