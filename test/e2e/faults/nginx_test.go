package faults

import (
	"crypto/tls"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/testpki"
	"github.com/simpletuner/simpletuner-orchestration/internal/testutil"
	. "github.com/simpletuner/simpletuner-orchestration/test/e2e/e2etest"
)

// nginxSite is the README's reverse-proxy snippet, as the test runs it: TLS
// ends at nginx, HTTP/1.1 to the orchestrator with keep-alive, no buffering
// either way (event streams and log follows must flow at once; uploads
// stream through), and a read timeout that outlasts three stream pings.
const nginxSite = `
upstream simpletuner_orchestrator {
    server %s;
    keepalive 16;
}
server {
    listen 127.0.0.1:%d ssl;
    ssl_certificate     %s;
    ssl_certificate_key %s;
    client_max_body_size 0;

    location / {
        proxy_pass http://simpletuner_orchestrator;
        proxy_http_version 1.1;
        proxy_set_header Connection "";
        proxy_set_header Host $host;
        proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
        proxy_set_header X-Forwarded-Proto $scheme;
        proxy_buffering off;
        proxy_request_buffering off;
        proxy_read_timeout %s;
        proxy_send_timeout %s;
    }
}
`

// nginx is a private nginx process (Debian's binary) serving nginxSite.
type nginx struct {
	t    *testing.T
	dir  string
	port int
	cmd  *exec.Cmd
	done chan struct{}
	log  *testutil.Buffer
}

func nginxBinary(t *testing.T) string {
	for _, p := range []string{"/usr/sbin/nginx", "/usr/bin/nginx"} {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	if p, err := exec.LookPath("nginx"); err == nil {
		return p
	}
	t.Skip("nginx is not installed (Debian: apt-get install nginx; .ci/run installs it): the reverse-proxy scenario needs the real server")
	return ""
}

func startNginx(t *testing.T, upstream string, readTimeout time.Duration, cert, key string) *nginx {
	bin := nginxBinary(t)
	dir := t.TempDir()
	n := &nginx{t: t, dir: dir, port: FreePort(t)}
	user := ""
	if os.Geteuid() == 0 {
		user = "user root;\n" // its workers must reach the temporary directories under the test's 0700 tree
	}
	conf := fmt.Sprintf(`%sworker_processes 1;
pid %s/nginx.pid;
error_log stderr warn;
events { worker_connections 256; }
http {
    access_log off;
    client_body_temp_path %s/body;
    proxy_temp_path %s/proxy;
    fastcgi_temp_path %s/fastcgi;
    uwsgi_temp_path %s/uwsgi;
    scgi_temp_path %s/scgi;
%s}
`, user, dir, dir, dir, dir, dir, dir, fmt.Sprintf(nginxSite, upstream, n.port, cert, key, readTimeout, readTimeout))
	if err := os.WriteFile(filepath.Join(dir, "nginx.conf"), []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	check := exec.Command(bin, "-t", "-p", dir, "-c", filepath.Join(dir, "nginx.conf"))
	if out, err := check.CombinedOutput(); err != nil {
		t.Fatalf("nginx -t: %v\n%s", err, out)
	}
	n.start(bin)
	t.Cleanup(func() { n.stop() })
	return n
}

func (n *nginx) start(bin string) {
	n.log = &testutil.Buffer{}
	n.cmd = exec.Command(bin, "-p", n.dir, "-c", filepath.Join(n.dir, "nginx.conf"), "-g", "daemon off;")
	n.cmd.Stdout, n.cmd.Stderr = n.log, n.log
	n.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := n.cmd.Start(); err != nil {
		n.t.Fatal(err)
	}
	n.done = make(chan struct{})
	go func() { _ = n.cmd.Wait(); close(n.done) }()
}

// stop is a fast shutdown (SIGTERM), as a restart does when connections
// would otherwise keep the old process waiting; its worker goes with it.
func (n *nginx) stop() {
	if n.cmd == nil {
		return
	}
	_ = syscall.Kill(-n.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-n.done:
	case <-time.After(10 * time.Second):
		_ = syscall.Kill(-n.cmd.Process.Pid, syscall.SIGKILL)
		<-n.done
	}
	n.cmd = nil
}

func (n *nginx) url() string { return fmt.Sprintf("https://127.0.0.1:%d", n.port) }

// A real reverse proxy in front: Debian's nginx terminates TLS and forwards
// to the orchestrator with the README's settings. An idle worker's event
// stream stays up through several proxy read timeouts (scaled: 3 s against
// a 1 s ping; in production 60 s against 15 s); a job is dispatched through
// the proxy; restarting nginx while the job runs costs nothing: the worker
// opens a new stream, the job completes on its first attempt.
func TestBehindNginx(t *testing.T) {
	fullOnly(t)
	const readTimeout, ping = 3 * time.Second, time.Second
	ca := testpki.NewCA(t, "proxy test CA")
	pki := t.TempDir()
	cert, key := ca.Server(t).Write(t, pki, "nginx")
	caFile := ca.Write(t, pki, "ca")
	o := StartOrchestratorWith(t, OrchOptions{Metrics: true, PingInterval: ping.String(), HeartbeatTimeout: "10s"})
	h := NewHistory(t, o)
	px := startNginx(t, strings.TrimPrefix(o.URL, "http://"), readTimeout, cert, key)
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool()}}}
	Eventually(t, 10*time.Second, "nginx serving /readyz over TLS", func() bool {
		res, err := client.Get(px.url() + "/readyz")
		if err != nil {
			return false
		}
		res.Body.Close()
		return res.StatusCode == 200
	})
	w := o.StartWorker(WorkerSpec{Name: "proxied", Persistent: true, URL: px.url(), SelfFenceAfter: "20s",
		OrchestratorTOML: fmt.Sprintf("ca_file = %q\n", caFile), Command: h.WrapperCommand()})
	streams := func() int { return strings.Count(w.P.Output(), `"msg":"stream connected"`) }
	Eventually(t, 10*time.Second, "the worker's stream open through nginx", func() bool {
		return streams() == 1 && o.Metric("simpletuner_sse_connections") == 1
	})

	// Idle for more than three read timeouts: the pings keep the stream up.
	idleFrom := time.Now()
	for time.Since(idleFrom) < 3*readTimeout+time.Second {
		if n := streams(); n != 1 || o.Metric("simpletuner_sse_connections") != 1 {
			t.Fatalf("the idle stream through nginx was cut after %s (%d streams opened)", time.Since(idleFrom).Round(time.Millisecond), n)
		}
		time.Sleep(250 * time.Millisecond)
	}
	idle := time.Since(idleFrom)

	_, id := h.Submit(trainFor(5), nil)
	submitted := time.Now()
	o.WaitJob(id, "running", 20*time.Second)
	dispatched := time.Since(submitted)
	Eventually(t, 10*time.Second, "the job training", func() bool { return len(JobProcs(id)) > 0 })

	h.Fault("restart nginx (fast shutdown, then start) while %s trains", id)
	restarted := time.Now()
	px.stop()
	px.start(nginxBinary(t))
	var reconnected time.Duration
	Eventually(t, 20*time.Second, "a new stream through the restarted nginx", func() bool {
		if streams() >= 2 && o.Metric("simpletuner_sse_connections") == 1 {
			reconnected = time.Since(restarted)
			return true
		}
		return false
	})
	_, after := h.Submit(trainFor(0.3), nil)
	o.WaitJob(after, "completed", 30*time.Second)
	h.WaitAllTerminal(30 * time.Second)
	h.Finish()
	sum := h.Check(Expect{MaxRequeues: 0, Statuses: []string{"completed"}})
	if at := Attempts(h.Final[id]); len(at) != 1 {
		t.Errorf("the job running during the proxy restart ran %d attempts", len(at))
	}
	t.Logf("RESULT %s: idle stream through nginx up for %s (read timeout %s, ping %s); first job running %s after its submit; nginx restart mid-job: new stream %s later, 0 requeues; %s",
		t.Name(), idle.Round(time.Millisecond), readTimeout, ping, dispatched.Round(time.Millisecond), reconnected.Round(time.Millisecond), sum)
}

// The control for the keep-alive choice: with pings sparser than nginx's
// read timeout the proxy cuts the idle stream (and the worker reconnects),
// which is why ping_interval must stay well below proxy_read_timeout.
func TestBehindNginxSparsePings(t *testing.T) {
	fullOnly(t)
	const readTimeout, ping = 2 * time.Second, 5 * time.Second
	ca := testpki.NewCA(t, "proxy test CA")
	pki := t.TempDir()
	cert, key := ca.Server(t).Write(t, pki, "nginx")
	caFile := ca.Write(t, pki, "ca")
	o := StartOrchestratorWith(t, OrchOptions{PingInterval: ping.String(), HeartbeatTimeout: "10s"})
	px := startNginx(t, strings.TrimPrefix(o.URL, "http://"), readTimeout, cert, key)
	w := o.StartWorker(WorkerSpec{Name: "sparse", Persistent: true, URL: px.url(), SelfFenceAfter: "20s",
		OrchestratorTOML: fmt.Sprintf("ca_file = %q\n", caFile)})
	began := time.Now()
	var cut time.Duration
	Eventually(t, 15*time.Second, "nginx cutting the quiet stream", func() bool {
		if strings.Count(w.P.Output(), `"msg":"stream connected"`) >= 2 {
			cut = time.Since(began)
			return true
		}
		return false
	})
	t.Logf("RESULT %s: with ping %s and proxy_read_timeout %s the idle stream was cut and reopened within %s", t.Name(), ping, readTimeout, cut.Round(time.Millisecond))
}
