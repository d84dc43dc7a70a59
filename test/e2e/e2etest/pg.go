package e2etest

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	_ "github.com/lib/pq" // test infrastructure only
)

// PG is a private PostgreSQL cluster that a scenario may stop and start again
// on the same port and data directory (internal/pgtest's shared cluster
// cannot be restarted under other tests' feet).
type PG struct {
	URL   string
	dir   string
	bin   string
	port  int
	cred  *syscall.Credential
	mu    sync.Mutex
	cmd   *exec.Cmd
	done  chan struct{}
	logs  *bytes.Buffer
	logMu *sync.Mutex
}

var clusters struct {
	mu  sync.Mutex
	all []*PG
}

func stopClusters() {
	clusters.mu.Lock()
	defer clusters.mu.Unlock()
	for _, c := range clusters.all {
		c.Stop()
		os.RemoveAll(c.dir)
	}
	clusters.all = nil
}

// StartPG initdbs and starts a cluster; it is removed when the test ends.
func StartPG(t testing.TB) *PG {
	t.Helper()
	bin, err := pgBin()
	if err != nil {
		t.Fatal(err)
	}
	c := &PG{bin: bin}
	if os.Geteuid() == 0 {
		for _, name := range []string{"postgres", "nobody"} {
			if u, err := user.Lookup(name); err == nil {
				uid, _ := strconv.ParseUint(u.Uid, 10, 32)
				gid, _ := strconv.ParseUint(u.Gid, 10, 32)
				c.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
				break
			}
		}
	}
	c.dir, err = os.MkdirTemp("", "faults-pg-")
	if err != nil {
		t.Fatal(err)
	}
	if c.cred != nil {
		os.Chown(c.dir, int(c.cred.Uid), int(c.cred.Gid))
	}
	initdb := exec.Command(filepath.Join(bin, "initdb"), "-D", filepath.Join(c.dir, "data"), "-A", "trust", "-U", "postgres",
		"--no-sync", "-E", "UTF8", "--locale=C")
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: c.cred}
	if out, err := initdb.CombinedOutput(); err != nil {
		os.RemoveAll(c.dir)
		t.Fatalf("initdb: %v\n%s", err, out)
	}
	c.port = FreePort(t)
	c.URL = fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", c.port)
	clusters.mu.Lock()
	clusters.all = append(clusters.all, c)
	clusters.mu.Unlock()
	t.Cleanup(func() {
		c.Stop()
		if t.Failed() {
			t.Logf("---- postgres log ----\n%s", c.Logs())
		}
		os.RemoveAll(c.dir)
	})
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	return c
}

func pgBin() (string, error) {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	var found []string
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "postgres")); err == nil {
			found = append(found, d)
		}
	}
	if len(found) == 0 {
		if p, err := exec.LookPath("postgres"); err == nil {
			return filepath.Dir(p), nil
		}
		return "", errors.New("PostgreSQL server binaries not found; install them with: apt-get install -y postgresql")
	}
	v := func(d string) int { n, _ := strconv.Atoi(filepath.Base(filepath.Dir(d))); return n }
	sort.Slice(found, func(i, j int) bool { return v(found[i]) > v(found[j]) })
	return found[0], nil
}

// Start starts the server (again) and waits until it accepts connections.
func (c *PG) Start() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cmd != nil {
		return nil
	}
	c.logs = &bytes.Buffer{}
	cmd := exec.Command(filepath.Join(c.bin, "postgres"), "-D", filepath.Join(c.dir, "data"),
		"-p", strconv.Itoa(c.port), "-k", c.dir, "-c", "listen_addresses=127.0.0.1",
		"-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off",
		"-c", "max_connections=300")
	c.logMu = &sync.Mutex{}
	w := lockedWriter{c.logMu, c.logs}
	cmd.Stdout, cmd.Stderr = w, w
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c.cred, Pdeathsig: syscall.SIGQUIT}
	if err := cmd.Start(); err != nil {
		return err
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	c.cmd, c.done = cmd, done
	db, err := sql.Open("postgres", c.URL)
	if err != nil {
		return err
	}
	defer db.Close()
	deadline := time.Now().Add(60 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := db.PingContext(ctx)
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-done:
			return fmt.Errorf("postgres exited during start-up")
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("postgres not up within 60s: %v", err)
		}
	}
}

// Stop shuts the server down fast (SIGINT: abort transactions, disconnect everyone).
func (c *PG) Stop() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cmd == nil {
		return
	}
	_ = c.cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-c.done:
	case <-time.After(30 * time.Second):
		_ = c.cmd.Process.Kill()
		<-c.done
	}
	c.cmd = nil
}

// Logs is the server's output since its last start.
func (c *PG) Logs() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.logs == nil {
		return ""
	}
	c.logMu.Lock()
	defer c.logMu.Unlock()
	return c.logs.String()
}
