// Package ctle2e runs the real simpletunerctl binary against real
// orchestrators and workerds (SQLite, loopback TCP with an admin token, and
// the admin unix socket), as an admin would.
package ctle2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	. "github.com/simpletuner/simpletuner-orchestration/test/e2e/e2etest"
)

func TestMain(m *testing.M) { Main(m) }

// writeConfig puts a named training config in the orchestrator's configs directory.
func writeConfig(t *testing.T, o *Orch, name, body string) {
	t.Helper()
	if err := os.MkdirAll(o.ConfigsDir(), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(o.ConfigsDir(), name+".json"), []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}

func writeFile(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "f.json")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func lines(s string) []string { return strings.Split(strings.TrimRight(s, "\n"), "\n") }

func mustContain(t *testing.T, what, got string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(got, w) {
			t.Errorf("%s lacks %q:\n%s", what, w, got)
		}
	}
}

// TestEveryCommandOverTCP walks every command against one orchestrator over
// TCP with a token file, with a workerd running the demo trainer.
func TestEveryCommandOverTCP(t *testing.T) {
	t.Parallel()
	o := StartOrchestrator(t, "")
	c := overTCP(t, o)
	credDir := t.TempDir()
	norm := newNormalizer(credDir)

	// status, on an empty orchestrator: a stable JSON document.
	r := c.ok("status")
	mustContain(t, "status", r.Stdout, "Health:", "ok, ready", "Version:       dev\n", "Store:         sqlite\n", "Workers:", "0 queued, 0 running")
	golden(t, "status.json", norm.apply(c.ok("status", "-o", "json").Stdout))

	// worker create: the token goes to the credential file, 0600, never to stdout.
	cred := filepath.Join(credDir, "worker-token")
	r = c.ok("worker", "create", "gpu-a", "--persistent", "--label", "pool=x", "--credential", cred)
	mustContain(t, "worker create", r.Stdout, "created worker w_", "gpu-a", "persistent", "token written to "+cred)
	fi, err := os.Stat(cred)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("credential file: %v mode %v", err, fi.Mode())
	}
	workerToken := strings.TrimSpace(string(must(os.ReadFile(cred))))
	if !strings.HasPrefix(workerToken, "wt_") || strings.Contains(r.Stdout, workerToken) {
		t.Fatalf("credential holds %.6q…; stdout %q", workerToken, r.Stdout)
	}
	c.secrets = append(c.secrets, workerToken)
	c.want(1, "worker", "create", "gpu-x", "--credential", cred) // exists, no --force: nothing is created
	if strings.Contains(c.ok("workers").Stdout, "gpu-x") {
		t.Fatal("a refused worker create still created the worker")
	}

	// A second create prints its token once, as JSON too.
	r = c.ok("worker", "create", "spare", "--ephemeral", "-o", "json")
	var created map[string]any
	if err := json.Unmarshal([]byte(r.Stdout), &created); err != nil || !strings.HasPrefix(created["token"].(string), "wt_") {
		t.Fatalf("worker create -o json: %v\n%s", err, r.Stdout)
	}
	c.secrets = append(c.secrets, created["token"].(string))
	spareID := created["worker_id"].(string)

	// The workerd runs with the token simpletunerctl wrote.
	w := o.StartWorker(WorkerSpec{Name: "gpu-a", Persistent: true, ID: workerID(t, c, "gpu-a"), Token: workerToken})

	r = c.ok("workers")
	mustContain(t, "workers", r.Stdout, "NAME", "GPUS", "gpu-a", w.ID, "idle", "spare", "never connected")
	mustContain(t, "workers -o wide", c.ok("workers", "-o", "wide").Stdout, "persistent", "pool=x", "workerd")
	r = c.want(2, "worker", "show", "w_")
	mustContain(t, "ambiguous prefix", r.Stderr, "\"w_\" matches 2 workers", w.ID, spareID)
	c.want(3, "worker", "show", "nobody")
	c.ok("worker", "delete", spareID)
	golden(t, "workers.json", norm.apply(c.ok("workers", "-o", "json").Stdout))
	mustContain(t, "worker show", c.ok("worker", "show", "gpu-a").Stdout, "Name:", "gpu-a", "Labels:", "pool=x")
	mustContain(t, "worker show by id prefix", c.ok("worker", "show", w.ID[:6]).Stdout, w.ID)

	// labels: show, set, clear.
	if got := c.ok("worker", "labels", "gpu-a").Stdout; got != "pool=x\n" {
		t.Fatalf("worker labels: %q", got)
	}
	if got := c.ok("worker", "labels", "gpu-a", "team=nlp").Stdout; got != "pool=x\nteam=nlp\n" {
		t.Fatalf("worker labels add (the others stay): %q", got)
	}
	if got := c.ok("worker", "labels", "gpu-a", "pool-", "zone=eu").Stdout; got != "team=nlp\nzone=eu\n" {
		t.Fatalf("worker labels remove and add: %q", got)
	}
	if got := c.ok("worker", "labels", "gpu-a", "--clear").Stdout; got != "" {
		t.Fatalf("worker labels --clear: %q", got)
	}
	c.ok("worker", "labels", "gpu-a", "pool=x")
	c.want(2, "worker", "labels", "gpu-a", "novalue")

	// submit by name, by file and on stdin; --wait exits by the outcome.
	writeConfig(t, o, "quick", `{"steps": 3, "step_seconds": 0.1, "publish": true}`)
	r = c.ok("submit", "quick", "--label", "pool=x", "--wait")
	mustContain(t, "submit --wait", r.Stdout, "submitted job j_", "completed")
	first := strings.Fields(r.Stdout)[2]
	r = c.want(1, "submit", "--config", writeFile(t, `{"steps": 1, "step_seconds": 0.1, "exit_code": 3}`), "--wait", "--priority", "20")
	mustContain(t, "failing submit --wait", r.Stdout, "failed")
	second := strings.Fields(r.Stdout)[2]
	r = c.runStdin(`{"steps": 1, "step_seconds": 0.1}`, "submit", "-", "-q", "--gpus", "0", "--min-vram", "0")
	if r.Code != 0 || !strings.HasPrefix(r.Stdout, "j_") || len(lines(r.Stdout)) != 1 {
		t.Fatalf("submit - -q: %s", r)
	}
	third := strings.TrimSpace(r.Stdout)
	o.WaitJob(third, "completed", 20*time.Second)

	// Bad submissions change nothing and say why.
	r = c.want(2, "submit")
	mustContain(t, "submit without config", r.Stderr, "simpletunerctl submit: give one of CONFIG_NAME")
	r = c.want(2, "submit", "--config", writeFile(t, `{"steps": `))
	mustContain(t, "submit bad json", r.Stderr, "not valid JSON", "line 1")
	r = c.want(1, "submit", "quick", "--priority", "99")
	mustContain(t, "submit bad priority", r.Stderr, "simpletunerctl submit: field \"priority\" must be from 0 to 50")
	r = c.want(3, "submit", "no-such-config")
	mustContain(t, "submit unknown config", r.Stderr, "Config 'no-such-config' not found")

	// jobs: newest first, filters.
	r = c.ok("jobs")
	ls := lines(r.Stdout)
	if len(ls) != 4 || !strings.HasPrefix(ls[1], third) || !strings.HasPrefix(ls[2], second) || !strings.HasPrefix(ls[3], first) {
		t.Fatalf("jobs, newest first:\n%s", r.Stdout)
	}
	if ls := lines(c.ok("jobs", "--status", "failed").Stdout); len(ls) != 2 || !strings.HasPrefix(ls[1], second) {
		t.Fatalf("jobs --status failed:\n%s", strings.Join(ls, "\n"))
	}
	if ls := lines(c.ok("jobs", "--limit", "1").Stdout); len(ls) != 2 || !strings.HasPrefix(ls[1], third) {
		t.Fatalf("jobs --limit 1:\n%s", strings.Join(ls, "\n"))
	}
	if ls := lines(c.ok("jobs", "--worker", "gpu-a").Stdout); len(ls) != 4 {
		t.Fatalf("jobs --worker gpu-a:\n%s", strings.Join(ls, "\n"))
	}
	mustContain(t, "jobs -o wide", c.ok("jobs", "-o", "wide").Stdout, "TARGET", "pool=x", "exit")
	golden(t, "jobs.json", norm.apply(c.ok("jobs", "-o", "json").Stdout))

	// job: detail with attempts, by a prefix without "j_".
	r = c.ok("job", strings.TrimPrefix(first, "j_")[:7])
	mustContain(t, "job", r.Stdout, "Job:", first, "completed", "Config:", "quick", "ATTEMPT", w.ID)
	golden(t, "job.json", norm.apply(c.ok("job", first, "-o", "json").Stdout))

	// logs.
	r = c.ok("logs", first)
	mustContain(t, "logs", r.Stdout, "demo-trainer: job "+first, "step 3/3", "training finished")
	if f := c.ok("logs", "-f", first); f.Stdout != r.Stdout {
		t.Fatalf("logs -f of a finished job differs from logs:\n%s\nvs\n%s", f.Stdout, r.Stdout)
	}
	// -o json: one object per line; -f ends with the end event.
	jl := lines(c.ok("logs", "-f", first, "-o", "json").Stdout)
	if len(jl) != len(lines(r.Stdout))+1 || jl[0] != `{"job_id":"`+first+`","line":"demo-trainer: job `+first+` attempt 1, 3 steps"}` ||
		jl[len(jl)-1] != `{"job_id":"`+first+`","status":"completed"}` {
		t.Fatalf("logs -f -o json:\n%s", strings.Join(jl, "\n"))
	}
	if got := lines(c.ok("logs", first, "-o", "json").Stdout); strings.Join(got, "\n") != strings.Join(jl[:len(jl)-1], "\n") {
		t.Fatalf("logs -o json differs from logs -f -o json:\n%s", strings.Join(got, "\n"))
	}

	// cancel: a running job, and one that does not exist (exit 3, the rest still done).
	slow := strings.TrimSpace(c.ok("submit", "--config", writeFile(t, `{"steps": 600, "step_seconds": 0.1}`), "-q").Stdout)
	o.WaitJob(slow, "running", 20*time.Second)
	r = c.want(3, "cancel", "j_aaaaaaaaaaaa", slow)
	mustContain(t, "cancel", r.Stdout, "job "+slow+" canceling")
	mustContain(t, "cancel", r.Stderr, "simpletunerctl cancel: j_aaaaaaaaaaaa: Job not found")
	o.WaitJob(slow, "cancelled", 20*time.Second)

	// artifacts: the quick job published its output with its upload token.
	mustContain(t, "artifacts", c.ok("artifacts", first).Stdout, "outputs/output.txt")
	dest := filepath.Join(t.TempDir(), "out")
	c.ok("download", first, "outputs/output.txt", "-O", dest)
	if b, err := os.ReadFile(dest); err != nil || string(b) != "trained 3 steps\n" {
		t.Fatalf("downloaded artifact: %q %v", b, err)
	}
	mustContain(t, "no artifacts", c.ok("artifacts", second).Stdout, "has no artifacts")
	c.want(3, "artifacts", "j_aaaaaaaaaaaa")

	// drain and resume.
	mustContain(t, "drain", c.ok("worker", "drain", "gpu-a").Stdout, w.ID, "draining")
	c.want(2, "worker", "drain", "gpu-a", "--bogus-flag")
	mustContain(t, "resume", c.ok("worker", "resume", "gpu-a").Stdout, "idle")
	r = c.want(1, "worker", "resume", "gpu-a")
	mustContain(t, "resume twice", r.Stderr, "simpletunerctl worker resume: worker "+w.ID+" is idle, not draining")

	// tokens: create (printed once), use, list, revoke.
	r = c.ok("tokens", "create", "--name", "viewer", "--scope", "queue.view")
	viewerToken := strings.TrimSpace(r.Stdout)
	mustContain(t, "tokens create", r.Stderr, "created admin token tok_", "shown only once")
	c.secrets = append(c.secrets, viewerToken)
	viewer := newCtl(t, map[string]string{"SIMPLETUNER_URL": o.URL, "SIMPLETUNER_ADMIN_TOKEN": viewerToken})
	viewer.secrets = c.secrets
	viewer.ok("jobs")
	r = viewer.want(4, "workers")
	mustContain(t, "workers with a queue.view token", r.Stderr, "simpletunerctl workers: this credential lacks the scope \"admin.workers\"")
	mustContain(t, "tokens list", c.ok("tokens", "list").Stdout, "viewer", "queue.view", "active", "e2e")
	golden(t, "tokens.json", norm.apply(c.ok("tokens", "list", "-o", "json").Stdout))
	mustContain(t, "tokens revoke", c.ok("tokens", "revoke", "viewer").Stdout, "revoked")
	r = viewer.want(4, "jobs")
	mustContain(t, "revoked token", r.Stderr, "simpletunerctl jobs: invalid admin token: unknown, rotated or revoked")

	// audit.
	r = c.ok("audit", "--limit", "5")
	if ls := lines(r.Stdout); len(ls) != 6 || !strings.HasPrefix(ls[0], "SEQ") {
		t.Fatalf("audit --limit 5:\n%s", r.Stdout)
	}
	mustContain(t, "audit --since 0", c.ok("audit", "--since", "0", "--limit", "0").Stdout, "worker.create", "job.submit", "admin_token.revoke")
	mustContain(t, "audit verify", c.ok("audit", "verify").Stdout, "audit chain intact")
	var verdict map[string]any
	if err := json.Unmarshal([]byte(c.ok("audit", "verify", "-o", "json").Stdout), &verdict); err != nil || verdict["ok"] != true {
		t.Fatalf("audit verify -o json: %v %v", err, verdict)
	}

	// delete needs --force while connected (asked before the rotation, which
	// closes the worker's stream); rotate: a new token, printed once.
	r = c.want(1, "worker", "delete", "gpu-a")
	mustContain(t, "delete busy worker", r.Stderr, "only a worker with no live connection can be deleted")
	r = c.ok("worker", "rotate", "gpu-a")
	mustContain(t, "rotate", r.Stdout, "new token for worker "+w.ID, "token (shown only once): wt_")
	mustContain(t, "delete --force", c.ok("worker", "delete", "gpu-a", "--force").Stdout, "deleted")
	c.want(3, "worker", "drain", "gpu-a")

	// Errors: not found 3, auth 4, usage 2, each one line prefixed with the command.
	r = c.want(3, "job", "j_aaaaaaaaaaaa")
	if r.Stderr != "simpletunerctl job: Job not found: j_aaaaaaaaaaaa\n" {
		t.Fatalf("job not found: %q", r.Stderr)
	}
	noToken := newCtl(t, map[string]string{"SIMPLETUNER_URL": o.URL})
	r = noToken.want(4, "jobs")
	mustContain(t, "no token", r.Stderr, "simpletunerctl jobs: authentication required")
	badToken := newCtl(t, map[string]string{"SIMPLETUNER_URL": o.URL, "SIMPLETUNER_ADMIN_TOKEN": "sta_not-a-real-token"})
	badToken.want(4, "status")
	r = c.want(2, "jobs", "--output", "yaml")
	mustContain(t, "bad -o", r.Stderr, "unknown output format \"yaml\"")
	c.want(2, "frobnicate")
	c.want(2, "worker")
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// workerID finds a worker's id by name with simpletunerctl itself.
func workerID(t *testing.T, c *ctl, name string) string {
	t.Helper()
	var ws struct {
		Workers []struct {
			ID   string `json:"worker_id"`
			Name string `json:"name"`
		} `json:"workers"`
	}
	if err := json.Unmarshal([]byte(c.ok("workers", "-o", "json").Stdout), &ws); err != nil {
		t.Fatal(err)
	}
	for _, w := range ws.Workers {
		if w.Name == name {
			return w.ID
		}
	}
	t.Fatalf("no worker %q", name)
	return ""
}

// TestOverUnixSocket runs the common commands over the admin socket, where
// the peer's uid is the credential and no token is sent.
func TestOverUnixSocket(t *testing.T) {
	t.Parallel()
	o := StartOrchestrator(t, "")
	c := overSocket(t, o)
	r := c.ok("status")
	mustContain(t, "status", r.Stdout, "unix://"+o.AdminSocket(), "ok, ready")

	cred := filepath.Join(t.TempDir(), "token")
	c.ok("worker", "create", "local-a", "--persistent", "--credential", cred)
	token := strings.TrimSpace(string(must(os.ReadFile(cred))))
	c.secrets = append(c.secrets, token, o.Admin)
	w := o.StartWorker(WorkerSpec{Name: "local-a", Persistent: true, ID: workerID(t, c, "local-a"), Token: token})
	mustContain(t, "workers", c.ok("workers").Stdout, "local-a", "idle")

	r = c.runStdin(`{"steps": 2, "step_seconds": 0.1}`, "submit", "-", "--wait")
	if r.Code != 0 {
		t.Fatalf("submit --wait over the socket: %s", r)
	}
	id := strings.Fields(r.Stdout)[2]
	mustContain(t, "logs", c.ok("logs", id).Stdout, "training finished")
	mustContain(t, "jobs", c.ok("jobs").Stdout, id, "completed")
	mustContain(t, "job", c.ok("job", id).Stdout, w.ID)
	mustContain(t, "audit verify", c.ok("audit", "verify").Stdout, "intact")
	mustContain(t, "tokens list", c.ok("tokens", "list").Stdout, "e2e")

	// Shell completion asks the orchestrator for names and ids.
	mustContain(t, "completion of worker names", c.ok("__complete", "worker", "drain", "").Stdout, "local-a\t"+w.ID)
	mustContain(t, "completion of job ids", c.ok("__complete", "logs", "").Stdout, id+"\tcompleted")

	// --watch redraws until interrupted; Ctrl-C ends it with status 0.
	watch := c.start("jobs", "-w", "--interval", "200ms")
	Eventually(t, 30*time.Second, "two frames of jobs -w", func() bool {
		out, _ := watch.output()
		return strings.Count(out, "ID ") >= 2
	})
	watch.cmd.Process.Signal(os.Interrupt)
	if code := watch.wait(t, 10*time.Second); code != 0 {
		t.Fatalf("jobs -w ended with %d on Ctrl-C", code)
	}

	// audit --follow prints records as they are written (JSON lines with -o json).
	follow := c.start("audit", "--follow", "--interval", "200ms", "--limit", "1", "-o", "json")
	Eventually(t, 30*time.Second, "the newest audit record", func() bool {
		out, _ := follow.output()
		return strings.Count(out, "\n") >= 1
	})
	c.ok("worker", "labels", "local-a", "followed=yes")
	Eventually(t, 30*time.Second, "the new record followed", func() bool {
		out, _ := follow.output()
		return strings.Contains(out, `"action":"worker.update"`) && strings.Contains(out, "followed")
	})
	follow.cmd.Process.Signal(os.Interrupt)
	if code := follow.wait(t, 10*time.Second); code != 0 {
		t.Fatalf("audit --follow ended with %d on Ctrl-C", code)
	}
	out, _ := follow.output()
	for _, l := range lines(out) {
		if !json.Valid([]byte(l)) {
			t.Fatalf("audit --follow -o json printed a line that is not JSON: %q", l)
		}
	}

	// A bare socket path is a URL too.
	bare := newCtl(t, map[string]string{"SIMPLETUNER_URL": o.AdminSocket()})
	bare.ok("workers")
}

// TestSubmitWaitExitCodes: --wait exits 0 for a completed job and 1 for a
// failed or cancelled one, so that scripts can branch on it.
func TestSubmitWaitExitCodes(t *testing.T) {
	t.Parallel()
	o := StartOrchestrator(t, "")
	o.StartWorker(WorkerSpec{Name: "w", Persistent: true})
	c := overTCP(t, o)

	for _, tc := range []struct {
		config string
		code   int
		status string
	}{
		{`{"steps": 2, "step_seconds": 0.1}`, 0, "completed"},
		{`{"steps": 2, "step_seconds": 0.1, "exit_code": 7}`, 1, "failed"},
	} {
		r := c.runStdin(tc.config, "submit", "-", "--wait")
		if r.Code != tc.code || !strings.Contains(r.Stdout, tc.status) {
			t.Errorf("submit --wait of a job that ends %s: want exit %d\n%s", tc.status, tc.code, r)
		}
	}

	// The reply's warnings go to stderr; the job is queued all the same.
	r := c.runStdin(`{"steps": 1}`, "submit", "-", "-q", "--gpus", "64")
	if r.Code != 0 || !strings.HasPrefix(r.Stdout, "j_") ||
		!strings.Contains(r.Stderr, "simpletunerctl submit: warning: no worker can run this job yet: it asks for 64 GPUs") {
		t.Errorf("submit of a job too large for every worker:\n%s", r)
	}
	c.ok("cancel", strings.TrimSpace(r.Stdout))

	// Cancelled while waiting: exit 1; -o json prints the final job.
	b := c.start("submit", "--config", writeFile(t, `{"steps": 600, "step_seconds": 0.1}`), "--wait", "-o", "json")
	var id string
	Eventually(t, 20*time.Second, "the job to be listed", func() bool {
		var reply struct {
			Entries []struct {
				ID string `json:"job_id"`
			} `json:"entries"`
		}
		_ = json.Unmarshal([]byte(c.ok("jobs", "--status", "active", "-o", "json").Stdout), &reply)
		if len(reply.Entries) > 0 {
			id = reply.Entries[0].ID
		}
		return id != ""
	})
	c.ok("cancel", id)
	if code := b.wait(t, 30*time.Second); code != 1 {
		out, errOut := b.output()
		t.Fatalf("submit --wait of a cancelled job: exit %d\n%s%s", code, out, errOut)
	}
	out, _ := b.output()
	// Two JSON documents: the submit reply, then the final job.
	dec := json.NewDecoder(strings.NewReader(out))
	var job map[string]any
	for dec.More() {
		job = nil
		if err := dec.Decode(&job); err != nil {
			t.Fatalf("submit --wait -o json: %v\n%s", err, out)
		}
	}
	if job["status"] != "cancelled" || job["job_id"] != id {
		t.Fatalf("submit --wait -o json ends with %v", job)
	}
}

// TestLogsFollowAcrossRestart: logs -f keeps following through an
// orchestrator restart (SIGTERM, then a new process on the same state and
// port) and prints every line exactly once.
func TestLogsFollowAcrossRestart(t *testing.T) {
	t.Parallel()
	o := StartOrchestrator(t, "")
	o.StartWorker(WorkerSpec{Name: "steady", Persistent: true})
	c := overTCP(t, o)
	id := strings.TrimSpace(c.ok("submit", "--config", writeFile(t, `{"steps": 40, "step_seconds": 0.1}`), "-q").Stdout)

	f := c.start("logs", "-f", id)
	Eventually(t, 20*time.Second, "a few log lines followed", func() bool {
		out, _ := f.output()
		return strings.Count(out, "\n") >= 3
	})
	o.P.Signal(syscall.SIGTERM)
	stopped := time.Now()
	if code, ok := o.P.Exited(20 * time.Second); !ok || code != 0 {
		t.Fatalf("orchestrator did not stop cleanly: code %d exited %v", code, ok)
	}
	// The follower's stream must not hold the graceful stop.
	if d := time.Since(stopped); d > 5*time.Second {
		t.Errorf("the orchestrator took %s to stop with a log follower attached", d)
	}
	o.Restart()
	if code := f.wait(t, 40*time.Second); code != 0 {
		out, errOut := f.output()
		t.Fatalf("logs -f: exit %d\n%s%s", code, out, errOut)
	}
	got, errOut := f.output()
	want := o.Logs(id)
	if got != want {
		t.Fatalf("logs -f across the restart differs from the stored log\n--- followed\n%s--- stored\n%s", got, want)
	}
	if !strings.Contains(want, "training finished") {
		t.Fatalf("the job's log is incomplete:\n%s", want)
	}
	mustContain(t, "logs -f stderr", errOut, "reconnecting", "-- job "+id+" completed")
}
