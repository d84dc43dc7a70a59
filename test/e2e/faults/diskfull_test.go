package faults

import (
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	_ "modernc.org/sqlite" // the integrity check reads the orchestrator's file

	"github.com/simpletuner/simpletuner-orchestration/internal/testutil"
	. "github.com/simpletuner/simpletuner-orchestration/test/e2e/e2etest"
)

// A full disk, three ways: the orchestrator's SQLite file, its artifacts and
// a worker's state_dir, each on a small tmpfs that the test fills with a
// filler file and then frees.

// integrity runs SQLite's own check on the file of a stopped orchestrator.
func integrity(t *testing.T, path string) string {
	t.Helper()
	db, err := sql.Open("sqlite", path+"?_pragma=query_only(1)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var verdict string
	if err := db.QueryRow(`PRAGMA integrity_check`).Scan(&verdict); err != nil {
		t.Fatalf("integrity check of %s: %v", path, err)
	}
	return verdict
}

func readyReason(o *Orch) (int, string) {
	body, _ := HTTPGet(o.URL+"/readyz", "")
	return o.Ready(), body
}

// The SQLite file's filesystem fills up while a job runs: writes get 507
// with a clear detail, reads and heartbeats go on, /readyz says why it is
// not ready, the log says so once; once space is freed everything resumes by
// itself, every job completes with its whole log, and the file is intact.
func TestDiskFullDatabase(t *testing.T) {
	fs := testutil.SmallFS(t, "24m")
	o := StartOrchestratorWith(t, OrchOptions{Metrics: true, StateDir: filepath.Join(fs, "state")})
	h := NewHistory(t, o)
	w := o.StartWorker(WorkerSpec{Name: "w0", Persistent: true, Command: h.WrapperCommand()})
	for range 3 {
		h.Submit(trainFor(0.2), nil)
	}
	_, long := h.Submit(trainFor(4), nil)
	o.WaitJob(long, "running", 20*time.Second)

	h.Fault("fill the filesystem of the SQLite database")
	filler := testutil.Fill(t, fs)
	// The write-ahead log may still take a few small writes: submit until
	// one is refused.
	pad := strings.Repeat("x", 8<<10)
	var status int
	var refusal map[string]any
	accepted := 0
	for i := 0; i < 300 && status != 507; i++ {
		cfg := trainFor(0.2)
		cfg["pad"] = pad
		status, refusal = h.SubmitReply(map[string]any{"config": cfg})
		if status == 201 {
			accepted++
		}
	}
	if status != 507 || refusal["error"] != "insufficient_storage" ||
		!strings.Contains(fmt.Sprint(refusal["detail"]), "no space left on the database's disk") {
		t.Fatalf("submit on a full disk: %d %v", status, refusal)
	}
	t.Logf("the full disk still took %d submits before refusing: %s", accepted, refusal["detail"])
	// Reads go on.
	for _, path := range []string{"/api/queue", "/api/queue/" + long, "/api/queue/stats", "/api/admin/workers", "/api/admin/audit"} {
		if st, _ := o.Do("GET", path, nil); st != 200 {
			t.Errorf("GET %s on a full disk: %d", path, st)
		}
	}
	if code, body := readyReason(o); code != 503 || !strings.Contains(body, "disk full") {
		t.Errorf("/readyz on a full disk: %d %s", code, body)
	}
	// Heartbeats go on: the worker outlives two heartbeat timeouts (1.5 s).
	time.Sleep(3500 * time.Millisecond)
	if wk := o.Worker(w.ID); wk["status"] == "offline" || wk["connected"] != true {
		t.Errorf("worker after 3.5 s of full disk: %v connected=%v", wk["status"], wk["connected"])
	}
	if m := o.Metric("simpletuner_disk_full"); m != 1 {
		t.Errorf("simpletuner_disk_full = %d", m)
	}

	h.Fault("free the space")
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	o.WaitReady(15 * time.Second)
	if st, _ := h.Submit(trainFor(0.2), nil); st != 201 {
		t.Fatalf("submit after space was freed: %d", st)
	}
	h.WaitAllTerminal(90 * time.Second)
	h.Finish()
	sum := h.Check(Expect{MaxRequeues: -1, Statuses: []string{"completed"}})
	logText := o.Logs(long)
	for i := 1; i <= 40; i++ {
		if !strings.Contains(logText, fmt.Sprintf("step %d/40 ", i)) {
			t.Errorf("the long job's log lacks step %d/40", i)
		}
	}
	out := o.P.Output()
	if n := strings.Count(out, "disk full: writes fail until space is freed"); n != 1 {
		t.Errorf("%d disk-full errors in the orchestrator's log, want 1", n)
	}
	if !strings.Contains(out, "disk has space again") {
		t.Error("no recovery line in the orchestrator's log")
	}
	o.P.Signal(syscall.SIGTERM)
	if code, ok := o.P.Exited(25 * time.Second); !ok || code != 0 {
		t.Fatalf("orchestrator did not stop cleanly: %d %v", code, ok)
	}
	verdict := integrity(t, filepath.Join(fs, "state", "orchestrator.db"))
	if verdict != "ok" {
		t.Fatalf("integrity check: %s", verdict)
	}
	t.Logf("RESULT %s: %s; %d submits accepted on the full disk before the first 507; integrity %s", t.Name(), sum, accepted, verdict)
}

// The artifacts' filesystem fills up: the upload is refused with 507 naming
// the artifacts, the trainer retries, and once space is freed the upload
// goes through and the job completes. (Without a reserve: with one, the
// upload is refused before the disk is full; see artifacts.reserve_percent.)
func TestDiskFullArtifacts(t *testing.T) {
	fs := testutil.SmallFS(t, "8m")
	o := StartOrchestratorWith(t, OrchOptions{Metrics: true,
		ExtraTOML: fmt.Sprintf("[artifacts]\ndir = %q\nreserve_percent = 0\n", filepath.Join(fs, "artifacts"))})
	h := NewHistory(t, o)
	o.StartWorker(WorkerSpec{Name: "w0", Persistent: true, Command: h.WrapperCommand()})
	h.Fault("fill the filesystem of the artifacts")
	filler := testutil.Fill(t, fs)
	_, id := h.Submit(map[string]any{"steps": 2, "step_seconds": 0.1, "publish": true, "publish_bytes": 1 << 20,
		"publish_retry_seconds": 60}, nil)
	Eventually(t, 30*time.Second, "the upload refused with 507", func() bool { return strings.Contains(o.Logs(id), "HTTP 507") })
	if l := o.Logs(id); !strings.Contains(l, "no space left on the disk that keeps artifacts") {
		t.Errorf("the trainer's log does not show the detail:\n%s", l)
	}
	// Everything but uploads works: the orchestrator stays in a load
	// balancer's rotation, and /readyz says what is wrong.
	if code, body := readyReason(o); code != 200 || !strings.Contains(body, "the artifacts' disk has no space left") {
		t.Errorf("/readyz with the artifacts' disk full: %d %s", code, body)
	}
	if j := o.Job(id); j["status"] != "running" {
		t.Errorf("job while its upload is refused: %v", j["status"])
	}
	h.Fault("free the space")
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	o.WaitJob(id, "completed", 60*time.Second)
	o.WaitReady(15 * time.Second)
	_, arts := o.Do("GET", "/api/queue/"+id+"/artifacts", nil)
	list, _ := arts["artifacts"].([]any)
	if len(list) != 1 || list[0].(map[string]any)["size"] != float64(1<<20) {
		t.Fatalf("artifacts after the disk was freed: %v", arts)
	}
	h.WaitAllTerminal(30 * time.Second)
	h.Finish()
	sum := h.Check(Expect{MaxRequeues: 0, Statuses: []string{"completed"}})
	if n := strings.Count(o.P.Output(), "disk full: writes fail until space is freed"); n != 1 {
		t.Errorf("%d disk-full errors in the orchestrator's log, want 1", n)
	}
	t.Logf("RESULT %s: %s; upload refused with 507 while full, stored after the space was freed", t.Name(), sum)
}

// One job cannot take the artifacts' disk: an upload that would leave less
// than artifacts.reserve_percent of it free is refused with 507 naming the
// setting, the orchestrator stays ready (its disk is not full), and another
// job's upload that fits beside the reserve is stored.
func TestArtifactReserve(t *testing.T) {
	fs := testutil.SmallFS(t, "8m")
	o := StartOrchestratorWith(t, OrchOptions{Metrics: true,
		ExtraTOML: fmt.Sprintf("[artifacts]\ndir = %q\nreserve_percent = 50\n", filepath.Join(fs, "artifacts"))})
	o.StartWorker(WorkerSpec{Name: "w0", Persistent: true})
	big := o.Submit(map[string]any{"steps": 1, "step_seconds": 0.1, "publish": true, "publish_bytes": 5 << 20}, nil)
	Eventually(t, 30*time.Second, "the 5 MiB upload refused", func() bool { return strings.Contains(o.Logs(big), "HTTP 507") })
	if l := o.Logs(big); !strings.Contains(l, "artifacts.reserve_percent = 50 %") {
		t.Errorf("the refusal does not name the reserve:\n%s", l)
	}
	if code, body := readyReason(o); code != 200 || strings.Contains(body, "disk full") {
		t.Errorf("/readyz after a refusal for the reserve: %d %s", code, body)
	}
	small := o.Submit(map[string]any{"steps": 1, "step_seconds": 0.1, "publish": true, "publish_bytes": 1 << 20}, nil)
	o.WaitJob(small, "completed", 60*time.Second)
	if strings.Contains(o.P.Output(), "disk full: writes fail") {
		t.Error("the reserve was taken for a full disk")
	}
}

// A worker's state_dir fills up while its job runs: the job keeps running,
// the worker warns once, no log line the orchestrator had acknowledged is
// lost, and the output held in memory reaches the orchestrator once space is
// freed.
func TestDiskFullWorkerStateDir(t *testing.T) {
	fullOnly(t) // keeps make test's fast subset under a minute; CI runs make faults too
	fs := testutil.SmallFS(t, "8m")
	o := StartOrchestratorWith(t, OrchOptions{Metrics: true})
	h := NewHistory(t, o)
	w := o.StartWorker(WorkerSpec{Name: "w0", Persistent: true, StateDir: filepath.Join(fs, "state"), Command: h.WrapperCommand()})
	// The spool's last page of memory has room for a few KiB after the disk
	// is full: padded lines get past it within a couple of seconds.
	cfg := trainFor(8)
	cfg["step_padding"] = 200
	_, id := h.Submit(cfg, nil)
	o.WaitJob(id, "running", 20*time.Second)
	Eventually(t, 20*time.Second, "a few steps shipped", func() bool { return strings.Contains(o.Logs(id), "step 5/80") })
	acked := o.Logs(id)

	h.Fault("fill the worker's state_dir")
	filler := testutil.Fill(t, fs)
	Eventually(t, 10*time.Second, "the worker's warning", func() bool { return strings.Contains(w.P.Output(), "cannot spool job output") })
	time.Sleep(time.Second) // output piles up in memory meanwhile
	if j := o.Job(id); j["status"] != "running" {
		t.Fatalf("job with a full state_dir: %v", j["status"])
	}
	h.Fault("free the worker's state_dir")
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	o.WaitJob(id, "completed", 60*time.Second)
	h.WaitAllTerminal(30 * time.Second)
	h.Finish()
	sum := h.Check(Expect{MaxRequeues: 0, Statuses: []string{"completed"}})
	final := o.Logs(id)
	if !strings.HasPrefix(final, acked) {
		t.Errorf("lines acknowledged before the disk filled were lost or changed:\nbefore: %q\nafter:  %q", acked, final)
	}
	last := 0
	for i := 1; i <= 80; i++ {
		at := strings.Index(final, fmt.Sprintf("step %d/80 ", i))
		if at < last {
			t.Errorf("step %d/80 missing or out of order in the stored log", i)
		}
		last = max(last, at)
	}
	wlog := w.P.Output()
	if strings.Count(wlog, "cannot spool job output") != 1 || !strings.Contains(wlog, "job output is spooled again") {
		t.Errorf("worker log: %d warnings, recovery line %v", strings.Count(wlog, "cannot spool job output"), strings.Contains(wlog, "job output is spooled again"))
	}
	t.Logf("RESULT %s: %s; the job ran on, %d bytes of log stored, none lost", t.Name(), sum, len(final))
}
