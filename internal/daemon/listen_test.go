package daemon

import (
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func httpGet(t *testing.T, network, addr string) string {
	t.Helper()
	c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, addr)
		},
	}}
	resp, err := c.Get("http://daemon/")
	if err != nil {
		t.Fatalf("GET over %s %s: %v", network, addr, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func freeTCPAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func clearActivationEnv(t *testing.T) {
	for _, k := range []string{"LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES"} {
		t.Setenv(k, "")
	}
}

func TestListenFallsBackToAddrs(t *testing.T) {
	clearActivationEnv(t)
	dir := shortTempDir(t)
	sock := filepath.Join(dir, "sub", "admin.sock")
	ls, err := Listen([]ListenSpec{
		{Name: "api", Addrs: []string{"127.0.0.1:0"}},
		{Name: "admin", Addrs: []string{"unix:" + sock}, UnixMode: 0o600, UnixGroup: "no-such-group-here"},
		{Name: "metrics"}, // no addresses: only when activated
	})
	if err != nil {
		t.Fatal(err)
	}
	defer closeAll(ls)
	if len(ls["api"]) != 1 || len(ls["admin"]) != 1 || len(ls["metrics"]) != 0 {
		t.Fatalf("listeners = %v", ls)
	}
	if Activated("api") || Activated("admin") {
		t.Fatal("fallback listeners reported as activated")
	}
	fi, err := os.Stat(sock)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 || fi.Mode().Type() != os.ModeSocket {
		t.Fatalf("socket mode = %v", fi.Mode())
	}
	if fi, err := os.Stat(filepath.Dir(sock)); err != nil || fi.Mode().Perm() != 0o755 {
		t.Fatalf("parent dir: %v %v", fi, err)
	}
	if ls["api"][0].Addr().Network() != "tcp" {
		t.Fatalf("api network = %s", ls["api"][0].Addr().Network())
	}
}

func TestListenUnixSocketFiles(t *testing.T) {
	clearActivationEnv(t)
	dir := shortTempDir(t)

	t.Run("stale socket is replaced", func(t *testing.T) {
		path := filepath.Join(dir, "stale.sock")
		l, err := net.Listen("unix", path)
		if err != nil {
			t.Fatal(err)
		}
		l.(*net.UnixListener).SetUnlinkOnClose(false)
		l.Close() // leaves the file behind, like a crash
		ls, err := Listen([]ListenSpec{{Name: "admin", Addrs: []string{"unix://" + path}}})
		if err != nil {
			t.Fatal(err)
		}
		closeAll(ls)
	})

	t.Run("live socket is left alone", func(t *testing.T) {
		path := filepath.Join(dir, "live.sock")
		l, err := net.Listen("unix", path)
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				c.Close()
			}
		}()
		_, err = Listen([]ListenSpec{{Name: "admin", Addrs: []string{"unix:" + path}}})
		if err == nil || !strings.Contains(err.Error(), "in use") {
			t.Fatalf("err = %v, want in use", err)
		}
	})

	t.Run("regular file is not removed", func(t *testing.T) {
		path := filepath.Join(dir, "file.sock")
		writeFile(t, path, "precious")
		_, err := Listen([]ListenSpec{{Name: "admin", Addrs: []string{"unix:" + path}}})
		if err == nil || !strings.Contains(err.Error(), "not a socket") {
			t.Fatalf("err = %v", err)
		}
	})

	t.Run("failure closes what was bound", func(t *testing.T) {
		busy, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer busy.Close()
		path := filepath.Join(dir, "first.sock")
		_, err = Listen([]ListenSpec{
			{Name: "admin", Addrs: []string{"unix:" + path}},
			{Name: "api", Addrs: []string{busy.Addr().String()}},
		})
		if err == nil {
			t.Fatal("binding a busy port succeeded")
		}
		if _, err := os.Stat(path); !os.IsNotExist(err) {
			t.Fatalf("socket of the failed Listen still exists: %v", err)
		}
	})

	t.Run("bad specs", func(t *testing.T) {
		for _, specs := range [][]ListenSpec{
			{{Name: ""}},
			{{Name: "api"}, {Name: "api"}},
			{{Name: "admin", Addrs: []string{"unix:relative.sock"}}},
		} {
			if _, err := Listen(specs); err == nil {
				t.Errorf("Listen(%v) succeeded", specs)
			}
		}
	})
}

// activate runs the activation helper under systemd-socket-activate, which binds the
// sockets and passes them as LISTEN_FDS with the given names.
func activate(t *testing.T, listen []string, fdnames string, env ...string) (*proc, *notifySocket) {
	t.Helper()
	bin, err := exec.LookPath("systemd-socket-activate")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("systemd-socket-activate not found (install systemd)")
		}
		t.Skip("systemd-socket-activate not found")
	}
	ns := listenNotify(t)
	argv := []string{bin}
	for _, l := range listen {
		argv = append(argv, "--listen="+l)
	}
	argv = append(argv, "--fdname="+fdnames,
		"--setenv=DAEMON_TEST_HELPER=activation", "--setenv=NOTIFY_SOCKET="+ns.Path)
	for _, kv := range env {
		argv = append(argv, "--setenv="+kv)
	}
	argv = append(argv, helperArgv()...)
	p := startProc(t, argv)
	// It prints "Listening on ADDR as FD." per socket once bound.
	deadline := time.Now().Add(10 * time.Second)
	for strings.Count(p.stderr.String(), "Listening on") < len(listen) {
		if time.Now().After(deadline) || !p.alive() {
			t.Fatalf("systemd-socket-activate did not bind its sockets:\n%s", p.stderr)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return p, ns
}

func TestSocketActivationByName(t *testing.T) {
	t.Parallel()
	api := freeTCPAddr(t)
	admin := filepath.Join(shortTempDir(t), "admin.sock")
	// The fallback addresses must lose to the activated fds.
	p, ns := activate(t, []string{api, admin}, "api:admin",
		"HELPER_API_ADDRS=127.0.0.1:1", "HELPER_ADMIN_ADDRS=unix:/nonexistent/dir/x.sock")

	// Without --accept, systemd-socket-activate starts the daemon on the first
	// connection; that connection waits in the backlog until the daemon serves it.
	if got := httpGet(t, "tcp", api); got != `api activated=true listen_fds=""` {
		t.Fatalf("api answered %q", got)
	}
	ns.expect(t, "READY=1")
	if got := httpGet(t, "unix", admin); got != `admin activated=true listen_fds=""` {
		t.Fatalf("admin answered %q", got)
	}
	p.signal(t, syscall.SIGTERM)
	ns.expect(t, "STOPPING=1")
	if err := p.wait(t); err != nil {
		t.Fatal(err)
	}
}

func TestSocketActivationPartialFallsBack(t *testing.T) {
	t.Parallel()
	api := freeTCPAddr(t)
	admin := filepath.Join(shortTempDir(t), "admin.sock")
	p, ns := activate(t, []string{api}, "api", "HELPER_ADMIN_ADDRS=unix:"+admin)
	if got := httpGet(t, "tcp", api); got != `api activated=true listen_fds=""` {
		t.Fatalf("api answered %q", got)
	}
	ns.expect(t, "READY=1")
	if got := httpGet(t, "unix", admin); got != `admin activated=false listen_fds=""` {
		t.Fatalf("admin answered %q", got)
	}
	p.signal(t, syscall.SIGTERM)
	if err := p.wait(t); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(admin); !os.IsNotExist(err) {
		t.Fatalf("self-bound admin socket left behind: %v", err)
	}
}

func TestSocketActivationUnknownName(t *testing.T) {
	t.Parallel()
	addr := freeTCPAddr(t)
	p, ns := activate(t, []string{addr}, "bogus")
	if c, err := net.Dial("tcp", addr); err == nil { // starts the daemon
		defer c.Close()
	}
	ns.expect(t, "STATUS=Start failed")
	if err := p.wait(t); err == nil {
		t.Fatal("helper accepted an fd named bogus")
	}
	if !strings.Contains(p.stderr.String(), `named "bogus" matches no listener`) {
		t.Fatalf("error does not name the fd:\n%s", p.stderr)
	}
}
