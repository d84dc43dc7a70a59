// Package e2e starts the real simpletuner-orchestratord and simpletuner-workerd
// binaries over real sockets and drives them through the admin API. Timers are
// scaled down through each daemon's TOML, never slept through at full length.
package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/pgtest"
)

var binDir string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "simpletuner-e2e-bin")
	if err != nil {
		panic(err)
	}
	binDir = dir
	for _, b := range []struct{ name, pkg, cgo string }{
		{"simpletuner-orchestratord", "./cmd/simpletuner-orchestratord", "0"},
		{"simpletuner-workerd", "./cmd/simpletuner-workerd", "1"},
		{"demo-trainer", "./test/demo-trainer", "0"},
	} {
		cmd := exec.Command("go", "build", "-o", filepath.Join(dir, b.name), b.pkg)
		cmd.Dir = "../.."
		cmd.Env = append(os.Environ(), "CGO_ENABLED="+b.cgo)
		if out, err := cmd.CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "building %s: %v\n%s", b.name, err, out)
			os.Exit(1)
		}
	}
	code := m.Run()
	pgtest.Stop()
	os.RemoveAll(dir)
	os.Exit(code)
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// proc is a running daemon.
type proc struct {
	cmd  *exec.Cmd
	log  *bytes.Buffer
	mu   *sync.Mutex
	done chan struct{}
	err  error
}

type lockedWriter struct {
	mu *sync.Mutex
	b  *bytes.Buffer
}

func (w lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func start(t *testing.T, name string, args ...string) *proc {
	t.Helper()
	p := &proc{log: &bytes.Buffer{}, mu: &sync.Mutex{}, done: make(chan struct{})}
	p.cmd = exec.Command(filepath.Join(binDir, name), args...)
	p.cmd.Stdout = lockedWriter{p.mu, p.log}
	p.cmd.Stderr = lockedWriter{p.mu, p.log}
	p.cmd.Env = append(os.Environ(), "NOTIFY_SOCKET=/nonexistent/notify.sock")
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.err = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		p.signal(syscall.SIGKILL)
		<-p.done
		if t.Failed() {
			t.Logf("---- %s log ----\n%s", name, p.output())
		}
	})
	return p
}

func (p *proc) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.log.String()
}

func (p *proc) signal(s syscall.Signal) { _ = p.cmd.Process.Signal(s) }

func (p *proc) exited(timeout time.Duration) (int, bool) {
	select {
	case <-p.done:
		return p.cmd.ProcessState.ExitCode(), true
	case <-time.After(timeout):
		return 0, false
	}
}

// orch is a running orchestrator with an admin token.
type orch struct {
	t     *testing.T
	dir   string
	url   string
	conf  string
	admin string
	p     *proc
}

// orchestratorTOML scales every timer down (heartbeat timeout 1.5 s).
func orchestratorTOML(dir string, port int, dbURL string) string {
	return fmt.Sprintf(`[server]
listen = ["127.0.0.1:%d"]
admin_socket = "%s/o.sock"
[database]
url = %q
[paths]
state_dir = "%s/state"
configs_dir = "%s/configs"
[workers]
heartbeat_interval = "200ms"
heartbeat_timeout = "1500ms"
health_check_interval = "200ms"
startup_grace = "3s"
ack_timeout = "3s"
ping_interval = "500ms"
[jobs]
cancel_grace = "1s"
cancel_report_timeout = "2s"
scheduler_interval = "200ms"
[log]
level = "debug"
[metrics]
listen = ""
`, port, dir, dbURL, dir, dir)
}

func startOrchestrator(t *testing.T, dbURL string) *orch {
	t.Helper()
	dir := t.TempDir()
	o := &orch{t: t, dir: dir, conf: filepath.Join(dir, "o.toml")}
	port := freePort(t)
	o.url = fmt.Sprintf("http://127.0.0.1:%d", port)
	if err := os.WriteFile(o.conf, []byte(orchestratorTOML(dir, port, dbURL)), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(filepath.Join(binDir, "simpletuner-orchestratord"), "--config", o.conf,
		"token", "create", "--name", "e2e", "--scope", "*").Output()
	if err != nil {
		t.Fatalf("token create: %v", err)
	}
	o.admin = strings.TrimSpace(string(out))
	o.restart()
	return o
}

// restart (re)starts the orchestrator process on the same config and state.
func (o *orch) restart() {
	o.t.Helper()
	o.p = start(o.t, "simpletuner-orchestratord", "--config", o.conf)
	eventually(o.t, 10*time.Second, "orchestrator ready", func() bool {
		res, err := http.Get(o.url + "/readyz")
		if err != nil {
			return false
		}
		res.Body.Close()
		return res.StatusCode == 200
	})
}

func (o *orch) do(method, path string, body any) (int, map[string]any) {
	o.t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, o.url+path, rd)
	req.Header.Set("Authorization", "Bearer "+o.admin)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil
	}
	defer res.Body.Close()
	var m map[string]any
	_ = json.NewDecoder(res.Body).Decode(&m)
	return res.StatusCode, m
}

func (o *orch) submit(config map[string]any, extra map[string]any) string {
	o.t.Helper()
	body := map[string]any{"config": config}
	for k, v := range extra {
		body[k] = v
	}
	st, m := o.do("POST", "/api/queue/submit", body)
	if st != 201 {
		o.t.Fatalf("submit: %d %v", st, m)
	}
	return m["job_id"].(string)
}

func (o *orch) job(id string) map[string]any {
	o.t.Helper()
	_, m := o.do("GET", "/api/queue/"+id, nil)
	return m
}

func (o *orch) waitJob(id, status string, timeout time.Duration) map[string]any {
	o.t.Helper()
	var j map[string]any
	eventually(o.t, timeout, "job "+id+" "+status, func() bool {
		j = o.job(id)
		return j != nil && j["status"] == status
	})
	return j
}

// wrk is a running workerd.
type wrk struct {
	id, token, conf, dir string
	p                    *proc
}

type workerSpec struct {
	name       string
	persistent bool
	labels     map[string]string
	url        string   // "" → the orchestrator's
	command    []string // "" → demo-trainer
}

func (o *orch) startWorker(s workerSpec) *wrk {
	o.t.Helper()
	typ := "ephemeral"
	if s.persistent {
		typ = "persistent"
	}
	st, m := o.do("POST", "/api/admin/workers", map[string]any{"name": s.name, "worker_type": typ, "labels": s.labels})
	if st != 201 {
		o.t.Fatalf("create worker: %d %v", st, m)
	}
	w := &wrk{id: m["worker_id"].(string), token: m["token"].(string), dir: o.t.TempDir()}
	os.WriteFile(filepath.Join(w.dir, "token"), []byte(w.token+"\n"), 0o600)
	url := s.url
	if url == "" {
		url = o.url
	}
	cmd := s.command
	if cmd == nil {
		cmd = []string{filepath.Join(binDir, "demo-trainer")}
	}
	cmdJSON, _ := json.Marshal(cmd)
	w.conf = filepath.Join(w.dir, "w.toml")
	os.WriteFile(w.conf, []byte(fmt.Sprintf(`[orchestrator]
url = %q
token_file = "%s/token"
[worker]
name = %q
persistent = %v
state_dir = "%s/state"
self_fence_after = "1s"
reconnect_max = "300ms"
[job]
command = %s
cancel_grace = "1s"
[gpu]
backend = "none"
[log]
level = "debug"
`, url, w.dir, s.name, s.persistent, w.dir, cmdJSON)), 0o600)
	w.p = start(o.t, "simpletuner-workerd", "--config", w.conf)
	eventually(o.t, 10*time.Second, "worker "+s.name+" idle", func() bool {
		_, m := o.do("GET", "/api/admin/workers/"+w.id, nil)
		return m["status"] == "idle" && m["connected"] == true
	})
	return w
}

func eventually(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(25 * time.Millisecond)
	}
}

// jobProcs lists the live processes of a job by the SIMPLETUNER_JOB_ID and
// SIMPLETUNER_ATTEMPT in their environment: what really runs, not what anyone reports.
func jobProcs(jobID string) map[int]string {
	out := map[int]string{}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		env, err := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
		if err != nil || !bytes.Contains(env, []byte("SIMPLETUNER_JOB_ID="+jobID+"\x00")) {
			continue
		}
		if stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat")); err == nil {
			if f := strings.Fields(string(stat)); len(f) > 2 && f[2] == "Z" {
				continue // a zombie runs nothing
			}
		}
		attempt := ""
		for _, kv := range bytes.Split(env, []byte{0}) {
			if v, ok := bytes.CutPrefix(kv, []byte("SIMPLETUNER_ATTEMPT=")); ok {
				attempt = string(v)
			}
		}
		out[pid] = attempt
	}
	return out
}

// overlapWatch samples a job's processes until stopped and records whether two
// attempts were ever alive at the same moment.
type overlapWatch struct {
	cancel  context.CancelFunc
	done    chan struct{}
	overlap []string
	seen    map[string]bool
}

func watchOverlap(jobID string) *overlapWatch {
	ctx, cancel := context.WithCancel(context.Background())
	w := &overlapWatch{cancel: cancel, done: make(chan struct{}), seen: map[string]bool{}}
	go func() {
		defer close(w.done)
		for ctx.Err() == nil {
			attempts := map[string]bool{}
			for _, a := range jobProcs(jobID) {
				attempts[a] = true
				w.seen[a] = true
			}
			if len(attempts) > 1 {
				w.overlap = append(w.overlap, fmt.Sprint(attempts))
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()
	return w
}

func (w *overlapWatch) stop() { w.cancel(); <-w.done }

func httpGet(url, token string) (string, error) {
	req, _ := http.NewRequest("GET", url, nil)
	req.Header.Set("Authorization", "Bearer "+token)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	return string(b), err
}
