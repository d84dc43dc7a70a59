package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	_ "modernc.org/sqlite"
)

// groupStore is a Store on a one-connection SQLite pool with group commit,
// and a table to write to.
func groupStore(t *testing.T) *Store {
	t.Helper()
	db, err := sql.Open("sqlite", filepath.Join(t.TempDir(), "g.db")+"?_txlock=immediate&_pragma=journal_mode(WAL)")
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(1)
	t.Cleanup(func() { db.Close() })
	if _, err := db.Exec(`CREATE TABLE t (k TEXT PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	return New(db, nil, Dialect{Name: "sqlite", GroupCommit: true}, nil)
}

// queueUp runs first, which holds the writer until the other writers are
// queued behind it, then starts them all; it returns their outcomes by key.
func queueUp(t *testing.T, s *Store, writers map[string]func(c conn) error) map[string]error {
	t.Helper()
	release, holding := make(chan struct{}), make(chan struct{})
	firstDone := make(chan error, 1)
	go func() {
		firstDone <- s.write(t.Context(), func(c conn) error {
			close(holding)
			<-release
			_, err := c.exec(t.Context(), `INSERT INTO t (k) VALUES ('first')`)
			return err
		})
	}()
	waitQueue := func(n int) {
		deadline := time.Now().Add(10 * time.Second)
		for {
			s.group.mu.Lock()
			got := len(s.group.queue)
			s.group.mu.Unlock()
			if got >= n {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%d writers queued, want %d", got, n)
			}
			time.Sleep(time.Millisecond) // polling the queue
		}
	}
	<-holding
	var mu sync.Mutex
	out := map[string]error{}
	var wg sync.WaitGroup
	for k, fn := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := s.write(t.Context(), fn)
			mu.Lock()
			out[k] = err
			mu.Unlock()
		}()
	}
	waitQueue(len(writers))
	close(release)
	wg.Wait()
	if err := <-firstDone; err != nil {
		t.Fatalf("first writer: %v", err)
	}
	return out
}

func insert(k string) func(c conn) error {
	return func(c conn) error {
		_, err := c.exec(context.Background(), `INSERT INTO t (k) VALUES (?)`, k)
		return err
	}
}

func stored(t *testing.T, s *Store) map[string]bool {
	t.Helper()
	rows, err := s.db.Query(`SELECT k FROM t`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]bool{}
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			t.Fatal(err)
		}
		out[k] = true
	}
	return out
}

// In one batch, a writer that fails is rolled back alone and keeps its
// error; the others are stored.
func TestGroupCommitWriterFailsAlone(t *testing.T) {
	s := groupStore(t)
	writers := map[string]func(c conn) error{}
	for i := range 10 {
		writers[fmt.Sprint("w", i)] = insert(fmt.Sprint("w", i))
	}
	oops := errors.New("oops")
	writers["half"] = func(c conn) error {
		if err := insert("half")(c); err != nil {
			return err
		}
		return oops // after a write: the write must go
	}
	out := queueUp(t, s, writers)
	got := stored(t, s)
	for k, err := range out {
		switch {
		case k == "half":
			if !errors.Is(err, oops) || got["half"] {
				t.Errorf("failing writer: %v, stored %v", err, got["half"])
			}
		case err != nil || !got[k]:
			t.Errorf("writer %s: %v, stored %v", k, err, got[k])
		}
	}
}

// A writer that breaks the batch's transaction itself (here: it ends it)
// fails the batch; every other writer is then run alone and stored.
func TestGroupCommitBrokenBatchRetriesEachAlone(t *testing.T) {
	s := groupStore(t)
	writers := map[string]func(c conn) error{}
	for i := range 10 {
		writers[fmt.Sprint("w", i)] = insert(fmt.Sprint("w", i))
	}
	writers["breaker"] = func(c conn) error {
		_, err := c.q.ExecContext(context.Background(), `ROLLBACK`)
		return err
	}
	out := queueUp(t, s, writers)
	got := stored(t, s)
	for k, err := range out {
		if k == "breaker" {
			if err == nil {
				t.Errorf("the writer that ended the transaction got no error")
			}
			continue
		}
		if err != nil || !got[k] {
			t.Errorf("writer %s: %v, stored %v", k, err, got[k])
		}
	}
}

// A writer whose context ended before its turn does not run.
func TestGroupCommitCancelledWriterDoesNotRun(t *testing.T) {
	s := groupStore(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	ran := false
	err := s.write(ctx, func(c conn) error { ran = true; return nil })
	if !errors.Is(err, context.Canceled) || ran {
		t.Errorf("cancelled writer: %v, ran %v", err, ran)
	}
	if err := s.write(t.Context(), insert("after")); err != nil || !stored(t, s)["after"] {
		t.Errorf("the next writer: %v", err)
	}
}
