// Package pgtest gives tests a real, throwaway PostgreSQL: one cluster per test
// binary (initdb into a temp dir, loopback port), one fresh database per test so
// parallel tests never see each other's rows. Set SIMPLETUNER_TEST_DATABASE_URL
// (a postgres:// URL) to use an existing server instead.
//
// Use it from TestMain so the cluster is stopped when the tests end:
//
//	func TestMain(m *testing.M) { pgtest.Main(m) }
//	func TestX(t *testing.T) { url := pgtest.Start(t); ... }
package pgtest

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"sync"
	"testing"
	"time"

	_ "github.com/lib/pq" // test infrastructure only; the store keeps its own import
)

// EnvURL names the variable that points the tests at an existing server.
const EnvURL = "SIMPLETUNER_TEST_DATABASE_URL"

// MissingBinaries is the failure message when no PostgreSQL server is installed.
const MissingBinaries = "PostgreSQL server binaries not found; install them with: apt-get install -y postgresql"

var shared struct {
	once  sync.Once
	url   string // server URL; its database is the admin one
	stop  func()
	err   error
	mu    sync.Mutex
	extra []string // databases created on an external server, dropped on stop
}

// Start returns the URL of a new, empty database for this test. The cluster is
// started on first use; a missing installation fails the test (never skips).
func Start(t testing.TB) string {
	t.Helper()
	shared.once.Do(func() { shared.url, shared.stop, shared.err = StartCluster() })
	if shared.err != nil {
		t.Fatal(shared.err)
	}
	u, err := createDatabase(shared.url)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// Main runs the tests and then stops the shared cluster (if one was started).
func Main(m *testing.M) {
	code := m.Run()
	Stop()
	os.Exit(code)
}

// Stop tears down what Start set up: the private cluster, or the databases
// created on an external server.
func Stop() {
	shared.mu.Lock()
	stop := shared.stop
	shared.stop = nil
	shared.mu.Unlock()
	if stop != nil {
		stop()
	}
}

// StartCluster starts a server (or adopts the one in SIMPLETUNER_TEST_DATABASE_URL)
// and returns the URL of its admin database and a function that stops it.
func StartCluster() (serverURL string, stop func(), err error) {
	if u := os.Getenv(EnvURL); u != "" {
		return u, dropCreated, nil
	}
	c, err := NewCluster()
	if err != nil {
		return "", nil, err
	}
	return c.URL, c.Remove, nil
}

// createDatabase makes a database named t_<random> on the server and returns
// its URL.
func createDatabase(serverURL string) (string, error) {
	u, err := url.Parse(serverURL)
	if err != nil {
		return "", fmt.Errorf("pgtest: %s must be a postgres:// URL: %w", EnvURL, err)
	}
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	name := "t_" + hex.EncodeToString(b)

	db, err := sql.Open("postgres", serverURL)
	if err != nil {
		return "", err
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := db.ExecContext(ctx, "CREATE DATABASE "+name); err != nil {
		return "", fmt.Errorf("pgtest: create database: %w", err)
	}
	if os.Getenv(EnvURL) != "" {
		shared.mu.Lock()
		shared.extra = append(shared.extra, name)
		shared.mu.Unlock()
	}
	u.Path = "/" + name
	return u.String(), nil
}

// dropCreated removes the databases this binary made on an external server.
func dropCreated() {
	shared.mu.Lock()
	names := shared.extra
	shared.extra = nil
	shared.mu.Unlock()
	if len(names) == 0 {
		return
	}
	db, err := sql.Open("postgres", os.Getenv(EnvURL))
	if err != nil {
		return
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for _, n := range names {
		// WITH (FORCE) needs PostgreSQL 13; fall back for older servers.
		if _, err := db.ExecContext(ctx, "DROP DATABASE IF EXISTS "+n+" WITH (FORCE)"); err != nil {
			_, _ = db.ExecContext(ctx, "DROP DATABASE IF EXISTS "+n)
		}
	}
}
