package pgtest

import (
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
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/testutil"
)

// Cluster is a private PostgreSQL server in a temp dir. It can be stopped and
// started again on the same port and data (fault tests restart it under load).
type Cluster struct {
	URL  string
	dir  string
	bin  string
	port int
	cred *syscall.Credential

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{} // closed when the server process is gone
	logs   *testutil.Buffer
}

// binDir returns the bin directory of the highest installed PostgreSQL.
func binDir() (string, error) {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	var found []string
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "initdb")); err == nil {
			found = append(found, d)
		}
	}
	if len(found) == 0 {
		if p, err := exec.LookPath("initdb"); err == nil {
			return filepath.Dir(p), nil
		}
		return "", errors.New(MissingBinaries)
	}
	version := func(d string) int {
		v, _ := strconv.Atoi(filepath.Base(filepath.Dir(d)))
		return v
	}
	sort.Slice(found, func(i, j int) bool { return version(found[i]) > version(found[j]) })
	return found[0], nil
}

// credential picks the user the server runs as: postgres refuses to run as
// root, so root hands it to the postgres system user (or nobody).
func credential() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	for _, name := range []string{"postgres", "nobody"} {
		u, err := user.Lookup(name)
		if err != nil {
			continue
		}
		uid, _ := strconv.ParseUint(u.Uid, 10, 32)
		gid, _ := strconv.ParseUint(u.Gid, 10, 32)
		return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
	}
	return nil, errors.New("pgtest: running as root and neither the postgres nor the nobody user exists")
}

// NewCluster runs initdb into a new temp dir and starts the server on a free
// loopback port with trust authentication. Remove it when done.
func NewCluster() (*Cluster, error) {
	bin, err := binDir()
	if err != nil {
		return nil, err
	}
	cred, err := credential()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "pgtest-")
	if err != nil {
		return nil, err
	}
	if cred != nil {
		if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
	}
	initdb := exec.Command(filepath.Join(bin, "initdb"), "-D", filepath.Join(dir, "data"), "-A", "trust", "-U", "postgres",
		"--no-sync", "-E", "UTF8", "--locale=C")
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	if out, err := initdb.CombinedOutput(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("pgtest: initdb: %v\n%s", err, out)
	}
	c := &Cluster{dir: dir, bin: bin, cred: cred}
	// A port picked free can be taken before the server binds it; retry.
	for try := 0; ; try++ {
		if c.port, err = testutil.FreePort(); err == nil {
			c.URL = fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", c.port)
			if err = c.Start(); err == nil {
				return c, nil
			}
		}
		if try == 2 {
			os.RemoveAll(dir)
			return nil, err
		}
	}
}

// Start starts the server (again, on the same port) and waits until it answers.
func (c *Cluster) Start() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cmd != nil {
		return nil
	}
	logs := &testutil.Buffer{}
	cmd := exec.Command(filepath.Join(c.bin, "postgres"), "-D", filepath.Join(c.dir, "data"),
		"-p", strconv.Itoa(c.port), "-k", c.dir, "-c", "listen_addresses=127.0.0.1",
		"-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off",
		"-c", "max_connections=500")
	cmd.Stdout, cmd.Stderr = logs, logs
	// Pdeathsig stops the server should the test binary die without cleanup.
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c.cred, Pdeathsig: syscall.SIGQUIT}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("pgtest: start postgres: %w", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	c.cmd, c.exited, c.logs = cmd, exited, logs

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
		case <-exited:
			c.cmd = nil
			return fmt.Errorf("pgtest: postgres exited during start-up:\n%s", logs.String())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			<-exited
			c.cmd = nil
			return fmt.Errorf("pgtest: postgres did not accept connections within 60s: %v\n%s", err, logs.String())
		}
	}
}

// Stop shuts the server down fast (SIGINT: abort transactions, disconnect
// everyone); the data stays for Start.
func (c *Cluster) Stop() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cmd == nil {
		return
	}
	_ = c.cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-c.exited:
	case <-time.After(30 * time.Second):
		_ = c.cmd.Process.Kill()
		<-c.exited
	}
	c.cmd = nil
}

// Remove stops the server and deletes its files.
func (c *Cluster) Remove() {
	c.Stop()
	os.RemoveAll(c.dir)
}

// Logs is the server's output since its last start.
func (c *Cluster) Logs() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.logs == nil {
		return ""
	}
	return c.logs.String()
}
