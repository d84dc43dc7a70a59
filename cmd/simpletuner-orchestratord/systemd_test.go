package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/testutil"
)

// waitNotify returns the index of the first datagram at or after from that
// contains want.
func waitNotify(t *testing.T, n *testutil.NotifySocket, want string, from int) int {
	t.Helper()
	return n.Wait(t, from, 15*time.Second, want, func(m testutil.Notification) bool { return strings.Contains(m.Text, want) })
}

// TestSocketActivatedDaemon runs the real binary under systemd-socket-activate
// with the API and admin sockets, as the packaged .socket units do, and checks
// readiness, the local admin socket, reload and stop notifications.
func TestSocketActivatedDaemon(t *testing.T) {
	activate, err := exec.LookPath("systemd-socket-activate")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("systemd-socket-activate not found (apt-get install systemd)")
		}
		t.Skip("systemd-socket-activate not found")
	}
	dir, err := os.MkdirTemp("", "std") // short: unix socket paths are limited to 108 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	bin := filepath.Join(dir, "simpletuner-orchestratord")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	apiAddr := l.Addr().String()
	l.Close()
	adminSock := filepath.Join(dir, "admin.sock")
	conf := filepath.Join(dir, "o.toml")
	// The configured addresses are unusable: only the activated sockets can work.
	os.WriteFile(conf, []byte(fmt.Sprintf(`[server]
listen = ["127.0.0.1:1"]
admin_socket = "/nonexistent/dir/o.sock"
[paths]
state_dir = %q
configs_dir = %q
[metrics]
listen = ""
`, filepath.Join(dir, "state"), dir)), 0o600)
	n := testutil.ListenNotify(t)
	cmd := exec.Command(activate, "--listen="+apiAddr, "--listen="+adminSock, "--fdname=api:admin",
		"--setenv=NOTIFY_SOCKET="+n.Path, bin, "--config", conf)
	var stderr strings.Builder
	var mu sync.Mutex
	cmd.Stderr = writerFunc(func(p []byte) (int, error) { mu.Lock(); defer mu.Unlock(); return stderr.Write(p) })
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-done
		if t.Failed() {
			mu.Lock()
			t.Logf("daemon output:\n%s", stderr.String())
			mu.Unlock()
		}
	})
	eventually := func(what string, f func() bool) {
		t.Helper()
		for deadline := time.Now().Add(15 * time.Second); !f(); time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s", what)
			}
		}
	}
	eventually("sockets bound", func() bool { mu.Lock(); defer mu.Unlock(); return strings.Count(stderr.String(), "Listening on") >= 2 })

	// The first connection starts the daemon; it answers once ready.
	get := func(client *http.Client, url string) (int, string) {
		res, err := client.Get(url)
		if err != nil {
			return 0, err.Error()
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	if code, body := get(http.DefaultClient, "http://"+apiAddr+"/readyz"); code != 200 {
		t.Fatalf("readyz over the activated API socket: %d %s", code, body)
	}
	ready := waitNotify(t, n, "READY=1", 0)
	waitNotify(t, n, "STATUS=", 0)

	// Root on the activated admin socket gets every scope without a token.
	unixClient := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", adminSock)
	}}}
	code, body := get(unixClient, "http://local/api/queue/stats")
	if os.Getuid() == 0 && code != 200 {
		t.Fatalf("admin socket as root: %d %s", code, body)
	}
	if code, _ := get(http.DefaultClient, "http://"+apiAddr+"/api/queue/stats"); code != 401 {
		t.Fatalf("API socket without a token: %d", code)
	}

	// SIGHUP with a broken file keeps the running config and the daemon up.
	good, _ := os.ReadFile(conf)
	os.WriteFile(conf, []byte("[server]\nlisten = 5\n"), 0o600)
	cmd.Process.Signal(syscall.SIGHUP)
	reloading := waitNotify(t, n, "RELOADING=1", ready)
	waitNotify(t, n, "READY=1", reloading)
	if code, _ := get(http.DefaultClient, "http://"+apiAddr+"/healthz"); code != 200 {
		t.Fatal("daemon stopped serving after a bad reload")
	}
	os.WriteFile(conf, good, 0o600)

	cmd.Process.Signal(syscall.SIGTERM)
	waitNotify(t, n, "STOPPING=1", reloading)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("exit after SIGTERM: %v", err)
		}
		done <- nil
	case <-time.After(20 * time.Second):
		t.Fatal("daemon did not stop within 20 s of SIGTERM")
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }
