package orchestrator_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/artifacts"
	"github.com/simpletuner/simpletuner-orchestration/internal/audit"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator/orchtest"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator/retention"
	"github.com/simpletuner/simpletuner-orchestration/internal/store"
	"github.com/simpletuner/simpletuner-orchestration/internal/testutil"
)

// finishJobs runs n jobs to completion on one agent and returns their ids,
// oldest first.
func (e *env) finishJobs(a *agent, n int) []string {
	e.t.Helper()
	var ids []string
	for range n {
		id := e.Submit(map[string]any{})
		ev := a.next("job_submit", eventWait)
		if ev["job_id"] != id {
			e.t.Fatalf("got job %v, want %s", ev["job_id"], id)
		}
		e.Must(a.report(id, "starting", map[string]any{"attempt": ev["attempt"]}), 200)
		e.Must(a.report(id, "completed", map[string]any{"attempt": ev["attempt"]}), 200)
		ids = append(ids, id)
	}
	return ids
}

func entryIDs(r orchtest.Reply) []string {
	var out []string
	es, _ := r.JSON["entries"].([]any)
	for _, e := range es {
		out = append(out, e.(map[string]any)["job_id"].(string))
	}
	return out
}

func reversed(s []string) []string {
	out := make([]string, len(s))
	for i, v := range s {
		out[len(s)-1-i] = v
	}
	return out
}

// GET /api/queue lists newest first by default and pages by a cursor; offset
// and oldest-first still work; worker_id filters; bad cursors name the field.
func TestQueuePagesNewestFirst(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, open func(testing.TB) store.Store) {
		e := setup(t, open(t))
		a := e.startAgent("a", nil, nil)
		done := e.finishJobs(a, 5)
		queued := []string{e.Submit(map[string]any{"target": "local"}), e.Submit(map[string]any{"target": "local"})}
		all := append(append([]string{}, done...), queued...)

		first := e.Must(e.Queue("limit=3"), 200)
		if got := entryIDs(first); fmt.Sprint(got) != fmt.Sprint(reversed(all)[:3]) {
			t.Fatalf("first page %v, want %v", got, reversed(all)[:3])
		}
		if first.JSON["order"] != "newest_first" || first.JSON["total"] != float64(7) || first.JSON["total_pending"] != float64(2) {
			t.Fatalf("first page: %s", first.Body)
		}
		// Follow the cursor to the end.
		var got []string
		path := "/api/queue?limit=3"
		for pages := 0; pages < 5; pages++ {
			r := e.Must(e.AdminDo("GET", path, nil), 200)
			got = append(got, entryIDs(r)...)
			next, _ := r.JSON["next"].(string)
			if next == "" {
				break
			}
			path = "/api/queue?limit=3&cursor=" + url.QueryEscape(next)
		}
		if fmt.Sprint(got) != fmt.Sprint(reversed(all)) {
			t.Fatalf("cursor pages %v, want %v", got, reversed(all))
		}
		// Oldest first, by cursor and by offset (upstream's clients).
		r := e.Must(e.Queue("order=oldest&limit=4"), 200)
		if fmt.Sprint(entryIDs(r)) != fmt.Sprint(all[:4]) || r.JSON["order"] != "oldest_first" {
			t.Fatalf("oldest first: %s", r.Body)
		}
		r = e.Must(e.Queue("limit=4&cursor="+url.QueryEscape(r.JSON["next"].(string))), 200)
		if fmt.Sprint(entryIDs(r)) != fmt.Sprint(all[4:]) || r.JSON["next"] != nil {
			t.Fatalf("oldest first, page 2: %s", r.Body)
		}
		r = e.Must(e.Queue("order=oldest&limit=2&offset=5"), 200)
		if fmt.Sprint(entryIDs(r)) != fmt.Sprint(all[5:]) {
			t.Fatalf("offset: %s", r.Body)
		}
		// Filters: status (total from the counts), worker (no total).
		r = e.Must(e.Queue("status=completed&limit=2"), 200)
		if fmt.Sprint(entryIDs(r)) != fmt.Sprint(reversed(done)[:2]) || r.JSON["total"] != float64(5) {
			t.Fatalf("completed: %s", r.Body)
		}
		r = e.Must(e.Queue("worker_id="+a.id), 200)
		if fmt.Sprint(entryIDs(r)) != fmt.Sprint(reversed(done)) {
			t.Fatalf("by worker: %s", r.Body)
		}
		if _, has := r.JSON["total"]; has {
			t.Fatalf("a worker filter has no total: %s", r.Body)
		}
		// Bad input names the parameter.
		cursor := e.Must(e.Queue("limit=1"), 200).JSON["next"].(string)
		for path, field := range map[string]string{
			"/api/queue?cursor=bogus":                         "cursor",
			"/api/queue?cursor=" + cursor + "&offset=2":       "offset",
			"/api/queue?cursor=" + cursor + "&order=oldest":   "order",
			"/api/queue?order=sideways":                       "order",
			"/api/queue?worker_id=" + strings.Repeat("w", 65): "worker_id",
		} {
			r := e.AdminDo("GET", path, nil)
			if r.Status != 422 || !strings.Contains(r.JSON["detail"].(string), field) {
				t.Errorf("%s: %d %s, want 422 naming %s", path, r.Status, r.Body, field)
			}
		}
	})
}

// The audit list pages by "next"; verify walks the chain, and after
// retention deleted the oldest records it starts from the checkpoint.
func TestAuditPagesAndVerify(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, open func(testing.TB) store.Store) {
		st := open(t)
		e := setup(t, st)
		for i := range 7 {
			if err := st.AppendAudit(context.Background(), audit.New("system", "", "test.event", "test", fmt.Sprint(i), audit.Success, nil)); err != nil {
				t.Fatal(err)
			}
		}
		r := e.Must(e.AdminDo("GET", "/api/admin/audit?limit=5", nil), 200)
		if r.JSON["count"] != float64(5) || r.JSON["next"] == nil || r.JSON["checkpoint"] != nil {
			t.Fatalf("first audit page: %s", r.Body)
		}
		r = e.Must(e.AdminDo("GET", "/api/admin/audit?limit=5&cursor="+r.JSON["next"].(string), nil), 200)
		if r.JSON["count"] == float64(0) || r.JSON["next"] != nil {
			t.Fatalf("second audit page: %s", r.Body)
		}
		v := e.Must(e.AdminDo("GET", "/api/admin/audit/verify", nil), 200)
		if v.JSON["ok"] != true || v.JSON["first_seq"] != float64(1) {
			t.Fatalf("verify: %s", v.Body)
		}
		// Retention deletes the first four records.
		recs, _ := st.ListAudit(context.Background(), 0, 4)
		cut := recs[3].Time.Add(time.Nanosecond)
		if n, _, err := st.PruneAudit(context.Background(), cut, 100); err != nil || n < 4 {
			t.Fatalf("PruneAudit: %d %v", n, err)
		}
		r = e.Must(e.AdminDo("GET", "/api/admin/audit", nil), 200)
		cp, _ := r.JSON["checkpoint"].(map[string]any)
		if cp == nil || cp["seq"] == nil || cp["hash"] == "" {
			t.Fatalf("audit page after retention: %s", r.Body)
		}
		v = e.Must(e.AdminDo("GET", "/api/admin/audit/verify", nil), 200)
		vcp, _ := v.JSON["checkpoint"].(map[string]any)
		if v.JSON["ok"] != true || vcp["seq"] != cp["seq"] || v.JSON["first_seq"] != cp["seq"].(float64)+1 {
			t.Fatalf("verify after retention: %s", v.Body)
		}
	})
}

// A pass deletes what expired, with its artifacts, and nothing that has not
// finished; the chain still verifies; /metrics says what went.
func TestRetentionPass(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, open func(testing.TB) store.Store) {
		e := setup(t, open(t), func(o *orchestrator.Options) { o.StartupGrace = time.Hour }) // passes run by hand
		jobID, a, token := e.runningJob("a")
		e.Must(e.put(token, "out/model.safetensors", strings.NewReader("weights"), 7), 200)
		e.Must(a.report(jobID, "completed", map[string]any{"attempt": 1}), 200)
		e.Must(e.Do("POST", "/api/workers/job/"+jobID+"/logs", map[string]string{"X-Worker-Token": a.token,
			"X-Attempt": "1", "X-Log-Offset": "0"}, "trained\n"), 200)
		running, b, _ := e.runningJob("b")
		queued := e.Submit(map[string]any{"target": "local"})
		e.srv.Retention().RefreshSizes(context.Background())
		before := e.metrics()
		if before[`simpletuner_db_rows{table="jobs"}`] != 3 || before["simpletuner_log_bytes"] != 8 || before["simpletuner_artifact_bytes"] != 7 {
			t.Fatalf("sizes before: %v", before)
		}

		// Keep logs and artifacts a millisecond: only the finished job's go.
		o := e.srv.Options()
		o.Retention = retention.Options{Logs: time.Millisecond, Artifacts: time.Millisecond, Interval: time.Hour, BatchSize: 1}
		e.srv.SetOptions(o)
		time.Sleep(5 * time.Millisecond) // the cut-off is a millisecond before the pass starts
		e.srv.Retention().Pass(context.Background())
		if got := e.AdminDo("GET", "/api/queue/"+jobID+"/logs", nil); got.Status != 200 || len(got.Body) != 0 {
			t.Fatalf("log after retention: %d %q", got.Status, got.Body)
		}
		if r := e.AdminDo("GET", "/api/queue/"+jobID+"/artifacts/out/model.safetensors", nil); r.Status != 404 {
			t.Fatalf("artifact after retention: %d", r.Status)
		}
		e.Job(jobID) // the job itself stays

		// Now the jobs too, and the audit records.
		o.Retention = retention.Options{Jobs: time.Millisecond, Audit: time.Millisecond, Interval: time.Hour, BatchSize: 2}
		e.srv.SetOptions(o)
		e.srv.Retention().Pass(context.Background())
		e.Must(e.AdminDo("GET", "/api/queue/"+jobID, nil), 404)
		for _, id := range []string{running, queued} {
			if j := e.Job(id); j["status"] == nil {
				t.Fatalf("job %s touched: %v", id, j)
			}
		}
		v := e.Must(e.AdminDo("GET", "/api/admin/audit/verify", nil), 200)
		if v.JSON["ok"] != true {
			t.Fatalf("verify after retention: %s", v.Body)
		}
		// The running job still works: its worker reports, a new job is dispatched.
		e.Must(b.report(running, "completed", map[string]any{"attempt": e.Job(running)["attempt"]}), 200)
		e.srv.Retention().RefreshSizes(context.Background())
		after := e.metrics()
		if after[`simpletuner_retention_deleted_total{kind="jobs"}`] != 1 || after[`simpletuner_retention_deleted_total{kind="logs"}`] != 1 ||
			after[`simpletuner_retention_deleted_total{kind="artifacts"}`] != 1 || after[`simpletuner_retention_deleted_total{kind="audit"}`] < 5 ||
			after["simpletuner_retention_passes_total"] != 2 || after["simpletuner_artifact_bytes"] != 0 {
			t.Fatalf("metrics after retention: %v", after)
		}
		if !strings.Contains(e.logs.String(), "retention pass done") {
			t.Fatal("no log line for the pass")
		}
	})
}

// metrics scrapes /metrics into name{labels} → value.
func (e *env) metrics() map[string]float64 {
	e.t.Helper()
	rec := &strings.Builder{}
	e.srv.WriteMetrics(context.Background(), rec)
	out := map[string]float64{}
	for _, line := range strings.Split(rec.String(), "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		var v float64
		fmt.Sscan(line[i+1:], &v)
		out[line[:i]] = v
	}
	return out
}

// fullDisk is a real store whose writes fail as on a full disk while full
// is set: the fault is injected, everything else is the real store.
type fullDisk struct {
	store.Store
	full atomic.Bool
}

func (f *fullDisk) err() error {
	if f.full.Load() {
		return fmt.Errorf("%w: database or disk is full (13)", store.ErrDiskFull)
	}
	return nil
}

func (f *fullDisk) InsertJob(ctx context.Context, j store.Job, rec *audit.Record) (store.Job, error) {
	if err := f.err(); err != nil {
		return store.Job{}, err
	}
	return f.Store.InsertJob(ctx, j, rec)
}

func (f *fullDisk) InsertTeamJob(ctx context.Context, j store.Job, maxQueued int, rec *audit.Record) (store.Job, error) {
	if err := f.err(); err != nil {
		return store.Job{}, err
	}
	return f.Store.InsertTeamJob(ctx, j, maxQueued, rec)
}

func (f *fullDisk) UpdateWorker(ctx context.Context, id string, fn func(*store.Worker) (*audit.Record, error)) (store.Worker, error) {
	if err := f.err(); err != nil {
		return store.Worker{}, err
	}
	return f.Store.UpdateWorker(ctx, id, fn)
}

func (f *fullDisk) ProbeWrite(ctx context.Context) error {
	if err := f.err(); err != nil {
		return err
	}
	return f.Store.ProbeWrite(ctx)
}

// While the disk is full: writes get 507 with a clear detail, reads and
// heartbeats go on, /readyz says why it is not ready, and the log says so
// once. Once space is back the orchestrator recovers by itself.
func TestDiskFull(t *testing.T) {
	t.Parallel()
	fd := &fullDisk{Store: backends["sqlite"](t)}
	e := setup(t, fd)
	a := e.startAgent("a", nil, nil)
	id := e.Submit(map[string]any{"target": "local"})
	fd.full.Store(true)
	for range 3 {
		r := e.AdminDo("POST", "/api/queue/submit", map[string]any{"config": map[string]any{"a": 1}})
		if r.Status != http.StatusInsufficientStorage || r.JSON["error"] != "insufficient_storage" ||
			!strings.Contains(r.JSON["detail"].(string), "no space left on the database's disk") || r.Header.Get("Retry-After") == "" {
			t.Fatalf("submit on a full disk: %d %s", r.Status, r.Body)
		}
	}
	e.Job(id)
	e.Must(e.Queue(""), 200)
	e.Must(a.heartbeat("idle", nil, nil), 200)
	ready := e.Do("GET", "/readyz", nil, nil)
	if ready.Status != 503 || !strings.Contains(fmt.Sprint(ready.JSON["reason"]), "disk full") {
		t.Fatalf("readyz on a full disk: %d %s", ready.Status, ready.Body)
	}
	if m := e.metrics(); m["simpletuner_disk_full"] != 1 {
		t.Fatalf("disk_full gauge %v", m["simpletuner_disk_full"])
	}
	// The worker stays online past its heartbeat timeout: its beats count.
	time.Sleep(2 * e.srv.Options().HeartbeatTimeout)
	if w := e.Worker(a.id); w["status"] != "idle" {
		t.Fatalf("worker while the disk is full: %v", w["status"])
	}
	if n := strings.Count(e.logs.String(), "disk full: writes fail"); n != 1 {
		t.Fatalf("%d disk-full log lines, want 1:\n%s", n, e.logs.String())
	}
	fd.full.Store(false)
	testutil.Eventually(t, eventWait, "ready again", func() bool { return e.Do("GET", "/readyz", nil, nil).Status == 200 })
	e.Submit(map[string]any{"target": "local"})
	if !strings.Contains(e.logs.String(), "disk has space again") {
		t.Fatal("no recovery log line")
	}
}

// An artifact write that finds the disk full is a 507 naming the artifacts.
func TestArtifactDiskFullIs507(t *testing.T) {
	t.Parallel()
	e := setup(t, backends["sqlite"](t))
	err := e.srv.Uploads().ArtifactError(&os.PathError{Op: "write", Path: "/srv/artifacts/.tmp/1", Err: syscall.ENOSPC})
	rec := &captureWriter{h: http.Header{}}
	e.srv.Errs().Write(rec, &http.Request{URL: &url.URL{Path: "/api/cloud/storage/out/x"}}, err)
	if rec.status != 507 || !strings.Contains(rec.body.String(), "no space left on the disk that keeps artifacts") {
		t.Fatalf("artifact disk full: %d %s", rec.status, rec.body.String())
	}
	// Everything but uploads works: the orchestrator stays in rotation.
	if r := e.Do("GET", "/readyz", nil, nil); r.Status != 200 || !strings.Contains(fmt.Sprint(r.JSON["degraded"]), "the artifacts' disk") {
		t.Fatalf("readyz with the artifacts' disk full: %d %s", r.Status, r.Body)
	}
	// The disk has room: the watcher's probe write succeeds and it recovers.
	testutil.Eventually(t, eventWait, "space again", func() bool { _, degraded := e.srv.Disk().Problem(); return degraded == "" })
	if left := e.stored(); len(left) != 0 {
		t.Fatalf("the probe left %v", left)
	}
}

type captureWriter struct {
	h      http.Header
	status int
	body   strings.Builder
}

func (c *captureWriter) Header() http.Header         { return c.h }
func (c *captureWriter) WriteHeader(s int)           { c.status = s }
func (c *captureWriter) Write(b []byte) (int, error) { return c.body.Write(b) }

// An artifact store that cannot be reached is named as such (503), not
// taken for the database.
func TestArtifactStoreUnreachableIs503(t *testing.T) {
	t.Parallel()
	e := setup(t, backends["sqlite"](t))
	err := e.srv.Uploads().ArtifactError(fmt.Errorf("%w: %w", artifacts.ErrUnavailable, &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}))
	rec := &captureWriter{h: http.Header{}}
	e.srv.Errs().Write(rec, &http.Request{URL: &url.URL{Path: "/api/queue/j_x/artifacts"}}, err)
	if rec.status != 503 || !strings.Contains(rec.body.String(), "the artifact store is unreachable") || strings.Contains(rec.body.String(), "database") {
		t.Fatalf("artifact store down: %d %s", rec.status, rec.body.String())
	}
}
