// Package e2etest starts the real simpletuner-orchestratord and
// simpletuner-workerd binaries over real sockets and drives them through the
// admin API. Timers are scaled down through each daemon's TOML, never slept
// through at full length. It is shared by the end-to-end tests (test/e2e) and
// the fault-injection scenarios (test/e2e/faults).
package e2etest

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/pgtest"
	"github.com/simpletuner/simpletuner-orchestration/internal/slapdtest"
	"github.com/simpletuner/simpletuner-orchestration/internal/testutil"
)

// BinDir holds the binaries Main built.
var BinDir string

// Main builds the daemons, the demo trainer and simpletunerctl as releases are
// built, runs the tests, stops the shared PostgreSQL cluster and removes the
// binaries. Use it as TestMain.
func Main(m *testing.M) { main(m, "") }

// MainWithFaultHooks is Main for the fault suite: the daemons are built with
// the test hooks it drives (build tag faulthooks), which release builds lack.
func MainWithFaultHooks(m *testing.M) {
	timers = FaultTimers
	main(m, "faulthooks")
}

// TimerSet is the timers of an e2e orchestrator and its workerds, as their
// TOML files set them: the orchestrator's [workers] and [jobs], and
// workerd's [worker] and [job]. A test that needs another value sets it in
// OrchOptions or WorkerSpec, saying why.
type TimerSet struct {
	// orchestratord [workers]
	HeartbeatInterval   time.Duration
	HeartbeatTimeout    time.Duration
	HealthCheckInterval time.Duration
	StartupGrace        time.Duration
	AckTimeout          time.Duration
	PingInterval        time.Duration
	// orchestratord [jobs]
	SchedulerInterval   time.Duration
	CancelGrace         time.Duration
	CancelReportTimeout time.Duration
	// workerd [worker] and [job]
	SelfFenceAfter    time.Duration
	ReconnectMax      time.Duration
	WorkerCancelGrace time.Duration
}

// Timers are the timers of the suites whose tests run in parallel (test/e2e):
// the loops tick fast, so a test sees a change soon, and the deadlines are
// long enough that a loaded machine (the race detector, another suite on the
// same cores) does not lose a live worker.
//
// The heartbeat timeout stays above workerd's self-fence: a worker whose
// heartbeats go unanswered stops its job once self_fence_after has passed,
// before the orchestrator declares it lost and runs the job elsewhere, so two
// attempts of a job never train at once. workerd keeps its limit below the
// timeout the orchestrator announces by max(heartbeat interval, a quarter of
// the timeout) in any case (3 s and 200 ms allow 2.25 s); the 2 s here keeps
// that margin without relying on the correction, which would log a warning.
var Timers = TimerSet{
	HeartbeatInterval:   200 * time.Millisecond,
	HeartbeatTimeout:    3 * time.Second,
	HealthCheckInterval: 200 * time.Millisecond,
	// After a start no worker is judged lost within it: its workerds
	// reconnect first.
	StartupGrace:      3 * time.Second,
	AckTimeout:        3 * time.Second,
	PingInterval:      500 * time.Millisecond,
	SchedulerInterval: 200 * time.Millisecond,
	// Long enough for the demo trainer to leave on SIGTERM.
	CancelGrace:         time.Second,
	CancelReportTimeout: 2 * time.Second,
	SelfFenceAfter:      2 * time.Second,
	// A worker cut off comes back soon after the orchestrator does.
	ReconnectMax:      300 * time.Millisecond,
	WorkerCancelGrace: time.Second,
}

// FaultTimers are Timers with the shorter heartbeat pair of the fault
// scenarios (test/e2e/faults), which run one at a time and time their
// partitions and jobs against it. The self-fence stays below the heartbeat
// timeout for the same reason as in Timers (1.5 s and 200 ms allow 1.125 s).
var FaultTimers = func() TimerSet {
	ts := Timers
	ts.HeartbeatTimeout, ts.SelfFenceAfter = 1500*time.Millisecond, time.Second
	return ts
}()

// timers are the timers in effect: Timers, or FaultTimers under
// MainWithFaultHooks.
var timers = Timers

// dur is a duration as the daemons' TOML reads it.
func dur(d time.Duration) string { return d.String() }

func main(m *testing.M, tags string) {
	dir, err := os.MkdirTemp("", "simpletuner-e2e-bin")
	if err != nil {
		panic(err)
	}
	BinDir = dir
	// Jobs may run as other uids (workerd as root): they exec the demo trainer.
	_ = os.Chmod(dir, 0o755)
	root, err := moduleRoot()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	for _, b := range []struct{ name, pkg, cgo string }{
		{"simpletuner-orchestratord", "./cmd/simpletuner-orchestratord", "0"},
		{"simpletuner-workerd", "./cmd/simpletuner-workerd", "1"},
		{"demo-trainer", "./test/demo-trainer", "0"},
		{"simpletunerctl", "./cmd/simpletunerctl", "0"},
	} {
		cmd := exec.Command("go", "build", "-tags", tags, "-o", filepath.Join(dir, b.name), b.pkg)
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "CGO_ENABLED="+b.cgo)
		if out, err := cmd.CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "building %s: %v\n%s", b.name, err, out)
			os.Exit(1)
		}
	}
	code := m.Run()
	pgtest.Stop()
	slapdtest.Stop()
	os.RemoveAll(dir)
	os.Exit(code)
}

func moduleRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	mod := strings.TrimSpace(string(out))
	if mod == "" || mod == os.DevNull {
		return "", fmt.Errorf("not inside the module")
	}
	return filepath.Dir(mod), nil
}

// FreePort returns a loopback TCP port that was free a moment ago.
func FreePort(t testing.TB) int { return testutil.MustFreePort(t) }

// Proc is a running daemon.
type Proc struct {
	Cmd  *exec.Cmd
	log  *testutil.Buffer
	done chan struct{}
	err  error
}

// Start runs one of the built binaries; it is killed when the test ends and
// its output is logged if the test failed.
func Start(t testing.TB, name string, args ...string) *Proc {
	t.Helper()
	return StartEnv(t, nil, name, args...)
}

// StartEnv is Start with env added to the process's environment.
func StartEnv(t testing.TB, env []string, name string, args ...string) *Proc {
	t.Helper()
	p := &Proc{log: &testutil.Buffer{}, done: make(chan struct{})}
	p.Cmd = exec.Command(filepath.Join(BinDir, name), args...)
	p.Cmd.Stdout = p.log
	p.Cmd.Stderr = p.log
	p.Cmd.Env = append(append(os.Environ(), "NOTIFY_SOCKET=/nonexistent/notify.sock"), env...)
	if err := p.Cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.err = p.Cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		p.Signal(syscall.SIGKILL)
		<-p.done
		if strings.HasPrefix(name, "simpletuner-") && name != "simpletunerctl" {
			ScanForSecrets(t, fmt.Sprintf("the log of %s (pid %d)", name, p.Pid()), p.Output())
		}
		if t.Failed() {
			out := p.Output()
			if len(out) > 200<<10 {
				out = "…" + out[len(out)-200<<10:]
			}
			t.Logf("---- %s (pid %d) log ----\n%s", name, p.Pid(), out)
		}
	})
	return p
}

// Output is everything the process wrote so far.
func (p *Proc) Output() string { return p.log.String() }

// Pid is the process id.
func (p *Proc) Pid() int { return p.Cmd.Process.Pid }

// Signal sends s (errors ignored: the process may be gone).
func (p *Proc) Signal(s syscall.Signal) { _ = p.Cmd.Process.Signal(s) }

// Exited waits up to timeout for the process to end and returns its exit code.
func (p *Proc) Exited(timeout time.Duration) (int, bool) {
	select {
	case <-p.done:
		return p.Cmd.ProcessState.ExitCode(), true
	case <-time.After(timeout):
		return 0, false
	}
}

// Kill9 sends SIGKILL and waits for the process to be gone.
func (p *Proc) Kill9() {
	p.Signal(syscall.SIGKILL)
	<-p.done
}

// OrchOptions scales an orchestrator. Zero values take the e2e defaults
// (the timers in effect, Timers or FaultTimers).
type OrchOptions struct {
	DBURL             string // "" → SQLite in the state dir
	DBTimeout         string // [database] timeout; "" → built-in default
	HeartbeatInterval string
	HeartbeatTimeout  string
	HealthCheck       string
	StartupGrace      string
	AckTimeout        string
	PingInterval      string
	SchedulerInterval string
	MaxRetries        int    // 0 → 3
	LogLimitBytes     int64  // 0 → built-in default
	MaxBodyBytes      int64  // 0 → built-in default
	BodyTimeout       string // [server] body_timeout; "" → built-in default
	// PublicURL sets server.public_url to the orchestrator's own address
	// (the OIDC redirect URI defaults to it).
	PublicURL bool
	Metrics   bool // serve /metrics on a free port (Orch.MetricsURL)
	LogLevel  string
	Env       []string // extra environment of the orchestrator process
	StateDir  string   // "" → <dir>/state
	ExtraTOML string   // appended to the file (whole tables, e.g. "[artifacts]\ndir = …")
	JobsTOML  string   // extra lines for [jobs] (preemption, min_runtime…)
	// TLS serves the API over HTTPS; with ClientCAFile, client certificates
	// are required (the harness then presents HarnessCert).
	TLS *TLSOptions
}

// TLSOptions are the orchestrator's [tls] files and what the harness's own
// client needs to talk to it.
type TLSOptions struct {
	CertFile, KeyFile, ClientCAFile string
	// RootCAs verifies the orchestrator's certificate; HarnessCert is the
	// harness's client certificate when ClientCAFile is set.
	RootCAs     *x509.CertPool
	HarnessCert *tls.Certificate
}

func or(v, def string) string {
	if v == "" {
		return def
	}
	return v
}

// Orch is a running orchestrator with an admin token.
type Orch struct {
	T          testing.TB
	Dir        string
	URL        string
	MetricsURL string
	Conf       string
	Admin      string
	Opt        OrchOptions
	P          *Proc
	// HTTP talks to this orchestrator (set when it serves TLS).
	HTTP *http.Client
}

// client is the HTTP client for this orchestrator.
func (o *Orch) client() *http.Client {
	if o.HTTP != nil {
		return o.HTTP
	}
	return client
}

func orchestratorTOML(dir string, port, metricsPort int, o OrchOptions) string {
	metrics := ""
	if metricsPort > 0 {
		metrics = fmt.Sprintf("127.0.0.1:%d", metricsPort)
	}
	maxRetries := o.MaxRetries
	if maxRetries == 0 {
		maxRetries = 3
	}
	extraJobs, extraServer, tlsSection, extraDB := "", "", "", ""
	if o.DBTimeout != "" {
		extraDB = fmt.Sprintf("timeout = %q\n", o.DBTimeout)
	}
	if t := o.TLS; t != nil {
		tlsSection = fmt.Sprintf("[tls]\ncert_file = %q\nkey_file = %q\nclient_ca_file = %q\n", t.CertFile, t.KeyFile, t.ClientCAFile)
	}
	if o.LogLimitBytes > 0 {
		extraJobs = fmt.Sprintf("log_limit_bytes = %d\n", o.LogLimitBytes)
	}
	extraJobs += o.JobsTOML
	if o.MaxBodyBytes > 0 {
		extraServer = fmt.Sprintf("max_body_bytes = %d\n", o.MaxBodyBytes)
	}
	if o.BodyTimeout != "" {
		extraServer += fmt.Sprintf("body_timeout = %q\n", o.BodyTimeout)
	}
	if o.PublicURL {
		extraServer += fmt.Sprintf("public_url = \"http://127.0.0.1:%d\"\n", port)
	}
	stateDir := o.StateDir
	if stateDir == "" {
		stateDir = dir + "/state"
	}
	return fmt.Sprintf(`[server]
listen = ["127.0.0.1:%d"]
admin_socket = "%s/o.sock"
%s%s[database]
url = %q
%s[paths]
state_dir = %q
configs_dir = "%s/configs"
[workers]
heartbeat_interval = %q
heartbeat_timeout = %q
health_check_interval = %q
startup_grace = %q
ack_timeout = %q
ping_interval = %q
[jobs]
max_retries = %d
cancel_grace = %q
cancel_report_timeout = %q
scheduler_interval = %q
%s[log]
level = %q
[metrics]
listen = %q
%s`, port, dir, extraServer, tlsSection, o.DBURL, extraDB, stateDir, dir,
		or(o.HeartbeatInterval, dur(timers.HeartbeatInterval)), or(o.HeartbeatTimeout, dur(timers.HeartbeatTimeout)),
		or(o.HealthCheck, dur(timers.HealthCheckInterval)), or(o.StartupGrace, dur(timers.StartupGrace)),
		or(o.AckTimeout, dur(timers.AckTimeout)), or(o.PingInterval, dur(timers.PingInterval)),
		maxRetries, dur(timers.CancelGrace), dur(timers.CancelReportTimeout), or(o.SchedulerInterval, dur(timers.SchedulerInterval)), extraJobs, or(o.LogLevel, "debug"), metrics, o.ExtraTOML)
}

// StartOrchestrator starts an orchestrator with the e2e timers on dbURL ("" → SQLite).
func StartOrchestrator(t testing.TB, dbURL string) *Orch {
	return StartOrchestratorWith(t, OrchOptions{DBURL: dbURL})
}

// StartOrchestratorWith starts an orchestrator scaled by opt and creates an admin token.
func StartOrchestratorWith(t testing.TB, opt OrchOptions) *Orch {
	t.Helper()
	dir := t.TempDir()
	o := &Orch{T: t, Dir: dir, Conf: filepath.Join(dir, "o.toml"), Opt: opt}
	// A free port can be taken by another process (another suite on the
	// same machine) between its choice and the daemon's bind: then the
	// daemon exits, and /readyz on that port may even answer for the other
	// one. Such a start is tried again on new ports.
	for try := 1; ; try++ {
		o.listenOnFreePorts(opt)
		o.Restart()
		out, err := exec.Command(filepath.Join(BinDir, "simpletuner-orchestratord"), "--config", o.Conf,
			"token", "create", "--name", "e2e", "--scope", "*").Output()
		if err == nil {
			o.Admin = strings.TrimSpace(string(out))
			NoteSecret("admin token", o.Admin)
			return o
		}
		if _, exited := o.P.Exited(5 * time.Second); exited && strings.Contains(o.P.Output(), "address already in use") && try < 5 {
			t.Logf("orchestrator start %d lost its port to another process; trying new ones", try)
			continue
		}
		t.Fatalf("token create: %v", err)
	}
}

// listenOnFreePorts picks the API (and metrics) ports and writes the
// configuration with them.
func (o *Orch) listenOnFreePorts(opt OrchOptions) {
	t := o.T
	port := FreePort(t)
	o.URL = fmt.Sprintf("http://127.0.0.1:%d", port)
	if opt.TLS != nil {
		o.URL = fmt.Sprintf("https://127.0.0.1:%d", port)
		tc := &tls.Config{RootCAs: opt.TLS.RootCAs, MinVersion: tls.VersionTLS12}
		if opt.TLS.HarnessCert != nil {
			tc.Certificates = []tls.Certificate{*opt.TLS.HarnessCert}
		}
		o.HTTP = &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: tc}}
	}
	metricsPort := 0
	if opt.Metrics {
		metricsPort = FreePort(t)
		o.MetricsURL = fmt.Sprintf("http://127.0.0.1:%d/metrics", metricsPort)
	}
	if err := os.WriteFile(o.Conf, []byte(orchestratorTOML(o.Dir, port, metricsPort, opt)), 0o600); err != nil {
		t.Fatal(err)
	}
}

// TeamToken creates a token of team with every scope through the admin
// API and returns it: jobs submitted with it are the team's.
func (o *Orch) TeamToken(team string) string {
	o.T.Helper()
	st, m := o.Do("POST", "/api/admin/tokens", map[string]any{"name": team + "-e2e", "scopes": []string{"*"}, "team": team})
	tok, _ := m["token"].(string)
	if st != 201 || tok == "" || m["team"] != team {
		o.T.Fatalf("create a token of team %s: %d %v", team, st, m)
	}
	NoteSecret("team token", tok)
	return tok
}

// As is o talking with token instead of the admin token (a copy for
// requests only: restart the original).
func (o *Orch) As(token string) *Orch {
	c := *o
	c.Admin = token
	return &c
}

// AdminSocket is the orchestrator's admin unix socket.
func (o *Orch) AdminSocket() string { return filepath.Join(o.Dir, "o.sock") }

// ConfigsDir is the orchestrator's configs directory (submit by config name).
func (o *Orch) ConfigsDir() string { return filepath.Join(o.Dir, "configs") }

// Restart (re)starts the orchestrator process on the same config and state
// and waits until it is ready.
func (o *Orch) Restart() {
	o.T.Helper()
	o.StartProcess()
	o.WaitReady(20 * time.Second)
}

// StartProcess starts the orchestrator process without waiting for it.
func (o *Orch) StartProcess() {
	o.P = StartEnv(o.T, o.Opt.Env, "simpletuner-orchestratord", "--config", o.Conf)
}

// WaitReady waits for /readyz to answer 200.
func (o *Orch) WaitReady(timeout time.Duration) {
	o.T.Helper()
	Eventually(o.T, timeout, "orchestrator ready", func() bool { return o.Ready() == 200 })
}

// Ready returns the /readyz status code (0 when unreachable or no answer within 2 s).
func (o *Orch) Ready() int { return o.ReadyWithin(2 * time.Second) }

// ReadyWithin returns the /readyz status code (0 when unreachable or no answer within timeout).
func (o *Orch) ReadyWithin(timeout time.Duration) int {
	c := *o.client()
	c.Timeout = timeout
	res, err := c.Get(o.URL + "/readyz")
	if err != nil {
		return 0
	}
	res.Body.Close()
	return res.StatusCode
}

// client has a transport of its own: an httptest.Server's Close (a webhook
// receiver's, in another test) closes http.DefaultTransport's idle
// connections, and a POST about to reuse one then fails instead of being
// retried.
var client = &http.Client{Timeout: 30 * time.Second, Transport: http.DefaultTransport.(*http.Transport).Clone()}

// Do sends an admin request; status 0 means no answer.
func (o *Orch) Do(method, path string, body any) (int, map[string]any) {
	o.T.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, o.URL+path, rd)
	req.Header.Set("Authorization", "Bearer "+o.Admin)
	res, err := o.client().Do(req)
	if err != nil {
		return 0, nil
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	if res.StatusCode >= 400 {
		ScanForSecrets(o.T, fmt.Sprintf("the %d answer to %s %s", res.StatusCode, method, path), string(raw))
	}
	var m map[string]any
	_ = json.Unmarshal(raw, &m)
	return res.StatusCode, m
}

// TrySubmit submits a job and returns the status code and job id ("" unless 201).
func (o *Orch) TrySubmit(config map[string]any, extra map[string]any) (int, string) {
	o.T.Helper()
	body := map[string]any{"config": config}
	for k, v := range extra {
		body[k] = v
	}
	st, m := o.Do("POST", "/api/queue/submit", body)
	if st != 201 {
		return st, ""
	}
	id, _ := m["job_id"].(string)
	return st, id
}

// Submit submits a job and fails the test unless it is accepted.
func (o *Orch) Submit(config map[string]any, extra map[string]any) string {
	o.T.Helper()
	st, id := o.TrySubmit(config, extra)
	if st != 201 {
		o.T.Fatalf("submit: %d", st)
	}
	return id
}

// Job returns the job with its attempts (nil when unreachable).
func (o *Orch) Job(id string) map[string]any {
	o.T.Helper()
	_, m := o.Do("GET", "/api/queue/"+id, nil)
	return m
}

// WaitTraining waits until the orchestrator knows the job's attempt started
// (running: the worker acknowledged it) and its trainer's process exists.
// A fault injected after it meets a job that has started on both sides; a
// trainer process alone may still be unacknowledged, and then losing its
// worker withdraws the attempt instead of losing it.
func (o *Orch) WaitTraining(id string, timeout time.Duration) {
	o.T.Helper()
	Eventually(o.T, timeout, "job "+id+" training and acknowledged", func() bool {
		return len(JobProcs(id)) > 0 && o.Job(id)["status"] == "running"
	})
}

// WaitJob waits until the job has status.
func (o *Orch) WaitJob(id, status string, timeout time.Duration) map[string]any {
	o.T.Helper()
	var j map[string]any
	Eventually(o.T, timeout, "job "+id+" "+status, func() bool {
		j = o.Job(id)
		return j != nil && j["status"] == status
	})
	return j
}

// Logs returns the job's stored log.
func (o *Orch) Logs(id string) string {
	o.T.Helper()
	out, _ := HTTPGet(o.URL+"/api/queue/"+id+"/logs", o.Admin)
	return out
}

// Worker returns the admin view of a worker.
func (o *Orch) Worker(id string) map[string]any {
	o.T.Helper()
	_, m := o.Do("GET", "/api/admin/workers/"+id, nil)
	return m
}

// CreateWorker creates a worker through the admin API and returns its id and token.
func (o *Orch) CreateWorker(name string, persistent bool, labels map[string]string) (id, token string) {
	o.T.Helper()
	typ := "ephemeral"
	if persistent {
		typ = "persistent"
	}
	// Unlocked: the tests' workers report their own labels and inventory
	// (the locked default has tests of its own).
	st, m := o.Do("POST", "/api/admin/workers", map[string]any{"name": name, "worker_type": typ, "labels": labels, "labels_locked": false})
	if st != 201 {
		o.T.Fatalf("create worker: %d %v", st, m)
	}
	NoteSecret("worker token", m["token"].(string))
	return m["worker_id"].(string), m["token"].(string)
}

// Wrk is a running workerd.
type Wrk struct {
	ID, Token, Conf, Dir string
	Spec                 WorkerSpec
	P                    *Proc
	o                    *Orch
}

// WorkerSpec describes a workerd.
type WorkerSpec struct {
	Name           string
	Persistent     bool
	Labels         map[string]string
	URL            string   // "" → the orchestrator's
	Command        []string // nil → demo-trainer
	SelfFenceAfter string   // "" → the timers' SelfFenceAfter
	LogLimitBytes  int64    // 0 → built-in default
	NoWait         bool     // do not wait for the worker to be idle
	// NoPersistentKey leaves worker.persistent out of the file: the worker
	// then takes the type the admin gave it (Persistent).
	NoPersistentKey bool
	URLPath         string // appended to the orchestrator's URL (a misconfiguration)
	// OrchestratorTOML holds extra lines for [orchestrator] (ca_file, cert_file…).
	OrchestratorTOML string
	CancelGrace      string // [job] cancel_grace; "" → the timers' WorkerCancelGrace
	JobTOML          string // extra lines for [job]
	// ID and Token name a worker created beforehand (e.g. by simpletunerctl);
	// empty: StartWorker creates one through the admin API.
	ID, Token string
	StateDir  string   // [worker] state_dir; "" → <dir>/state
	Args      []string // extra command-line flags
	Env       []string // extra environment of the workerd process
	// StaticGPUs gives the worker that many GPUs of the static backend
	// ("Test GPU", 80 GB, UUID GPU-<name>-<i>); 0 is a worker without GPUs.
	StaticGPUs int
	MaxJobs    int // [worker] max_jobs; 0 leaves it out
	// WorkerTOML holds extra lines for [worker] (drain_timeout…).
	WorkerTOML string
}

// DemoTrainer is the path of the built demo trainer.
func DemoTrainer() string { return filepath.Join(BinDir, "demo-trainer") }

// StartWorker creates a worker and starts a workerd for it.
func (o *Orch) StartWorker(s WorkerSpec) *Wrk {
	o.T.Helper()
	id, token := s.ID, s.Token
	if id == "" {
		id, token = o.CreateWorker(s.Name, s.Persistent, s.Labels)
	}
	return o.StartWorkerFor(id, token, s)
}

// StartWorkerFor starts a workerd for a worker created beforehand.
func (o *Orch) StartWorkerFor(id, token string, s WorkerSpec) *Wrk {
	o.T.Helper()
	NoteSecret("worker token", token)
	w := &Wrk{ID: id, Token: token, Dir: o.T.TempDir(), Spec: s, o: o}
	OpenToJobs(o.T, w.Dir)
	os.WriteFile(filepath.Join(w.Dir, "token"), []byte(w.Token+"\n"), 0o600)
	url := s.URL
	if url == "" {
		url = o.URL
	}
	cmd := s.Command
	if cmd == nil {
		cmd = []string{DemoTrainer()}
	}
	cmdJSON, _ := json.Marshal(cmd)
	extraJob := ""
	if s.LogLimitBytes != 0 {
		extraJob = fmt.Sprintf("log_limit_bytes = %d\n", s.LogLimitBytes)
	}
	persistent := fmt.Sprintf("persistent = %v\n", s.Persistent)
	if s.NoPersistentKey {
		persistent = ""
	}
	extraJob += s.JobTOML
	if os.Geteuid() == 0 && !strings.Contains(s.JobTOML, "user =") {
		// As root workerd runs each job under a uid of its own with the job
		// user's groups; the packages create simpletuner-job, a test machine
		// has nobody.
		extraJob += "user = \"nobody\"\n"
	}
	gpuTOML := "[gpu]\nbackend = \"none\"\n"
	if s.StaticGPUs > 0 {
		gpuTOML = "[gpu]\nbackend = \"static\"\n"
		for i := range s.StaticGPUs {
			gpuTOML += fmt.Sprintf("[[gpu.devices]]\nname = \"Test GPU\"\nmemory_gb = 80\nuuid = \"GPU-%s-%d\"\n", s.Name, i)
		}
	}
	if s.MaxJobs > 0 {
		persistent += fmt.Sprintf("max_jobs = %d\n", s.MaxJobs)
	}
	persistent += s.WorkerTOML
	w.Conf = filepath.Join(w.Dir, "w.toml")
	stateDir := s.StateDir
	if stateDir == "" {
		stateDir = w.Dir + "/state"
	}
	os.WriteFile(w.Conf, []byte(fmt.Sprintf(`[orchestrator]
url = %q
token_file = "%s/token"
%s[worker]
name = %q
%sstate_dir = %q
self_fence_after = %q
reconnect_max = %q
[job]
command = %s
cancel_grace = %q
%s%s[log]
level = "debug"
`, url+s.URLPath, w.Dir, s.OrchestratorTOML, s.Name, persistent, stateDir, or(s.SelfFenceAfter, dur(timers.SelfFenceAfter)), dur(timers.ReconnectMax), cmdJSON,
		or(s.CancelGrace, dur(timers.WorkerCancelGrace)), extraJob, gpuTOML)), 0o600)
	w.Restart()
	return w
}

// OpenToJobs lets jobs running as other uids pass through dir and its
// parents (search only, no listing), as the packaged state directory does.
func OpenToJobs(t testing.TB, dir string) {
	t.Helper()
	for d := dir; d != "/" && d != "."; d = filepath.Dir(d) {
		st, err := os.Stat(d)
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm()&0o001 == 0 {
			if err := os.Chmod(d, st.Mode().Perm()|0o011); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// Restart starts the workerd process again on the same config and state.
func (w *Wrk) Restart() {
	w.o.T.Helper()
	w.P = StartEnv(w.o.T, w.Spec.Env, "simpletuner-workerd", append([]string{"--config", w.Conf}, w.Spec.Args...)...)
	if !w.Spec.NoWait {
		w.o.WaitWorkerIdle(w.ID, 10*time.Second)
	}
}

// WaitWorkerIdle waits until the worker is connected and idle.
func (o *Orch) WaitWorkerIdle(id string, timeout time.Duration) {
	o.T.Helper()
	Eventually(o.T, timeout, "worker "+id+" idle", func() bool {
		m := o.Worker(id)
		return m["status"] == "idle" && m["connected"] == true
	})
}

// Eventually is testutil.Eventually, for the tests that dot-import this package.
var Eventually = testutil.Eventually

// HTTPGet fetches url with a bearer token.
func HTTPGet(url, token string) (string, error) {
	req, _ := http.NewRequest("GET", url, nil)
	req.Header.Set("Authorization", "Bearer "+token)
	res, err := client.Do(req)
	if err != nil {
		return "", err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	return string(b), err
}

// Attempts returns a job's attempts.
func Attempts(j map[string]any) []map[string]any {
	var out []map[string]any
	as, _ := j["attempts"].([]any)
	for _, a := range as {
		out = append(out, a.(map[string]any))
	}
	return out
}

// CloseIdle drops the harness client's idle keep-alive connections (so that
// connection and goroutine counts compare).
func CloseIdle() {
	client.CloseIdleConnections()
	http.DefaultClient.CloseIdleConnections()
}
