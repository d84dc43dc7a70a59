package postgres

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/pgtest"
	"github.com/simpletuner/simpletuner-orchestration/internal/store"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// open opens a store whose connections time out unanswered requests, as
// the orchestrator's do (and the conformance tests run through them).
func open(t *testing.T, url string) *Store {
	t.Helper()
	s, err := OpenWith(t.Context(), url, Options{Timeout: 10 * time.Second}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// Instances starting together on an empty database migrate it once.
func TestConcurrentOpen(t *testing.T) {
	t.Parallel()
	url := pgtest.Start(t)
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := Open(t.Context(), url, nil)
			if err != nil {
				errs <- err
				return
			}
			s.Close()
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	s := open(t, url)
	defer s.Close()
	ms, err := loadMigrations()
	if err != nil {
		t.Fatal(err)
	}
	var n int
	if err := s.DB().QueryRow(`SELECT count(*) FROM schema_migrations`).Scan(&n); err != nil || n != len(ms) {
		t.Fatalf("schema_migrations has %d rows (%v), want %d: each migration applied once", n, err, len(ms))
	}
}

func TestReopenKeepsData(t *testing.T) {
	t.Parallel()
	url := pgtest.Start(t)
	s := open(t, url)
	j, err := s.InsertJob(t.Context(), store.Job{ConfigName: "c"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	s = open(t, url)
	defer s.Close()
	if _, err := s.GetJob(t.Context(), j.ID); err != nil {
		t.Fatalf("job lost on reopen: %v", err)
	}
}

func TestSchemaTooNew(t *testing.T) {
	t.Parallel()
	url := pgtest.Start(t)
	s := open(t, url)
	if _, err := s.DB().Exec(`INSERT INTO schema_migrations (version, name, applied_at) VALUES (999, 'future', 0)`); err != nil {
		t.Fatal(err)
	}
	s.Close()
	_, err := Open(t.Context(), url, nil)
	if !errors.Is(err, store.ErrSchemaTooNew) {
		t.Fatalf("Open of a newer schema: %v, want ErrSchemaTooNew", err)
	}
	t.Log(err)
}

// Two stores on one database see each other's notifications.
func TestNotifyAcrossInstances(t *testing.T) {
	t.Parallel()
	url := pgtest.Start(t)
	a, b := open(t, url), open(t, url)
	defer a.Close()
	defer b.Close()
	ch, err := b.Subscribe(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	n := store.Notification{Kind: "worker_event", WorkerID: "w_1", Payload: "x", Origin: "a"}
	if err := a.Publish(t.Context(), n); err != nil {
		t.Fatal(err)
	}
	timeout := time.After(10 * time.Second)
	for {
		select {
		case got := <-ch:
			if got.Kind != "worker_event" {
				continue
			}
			if got != n {
				t.Fatalf("got %+v, want %+v", got, n)
			}
			return
		case <-timeout:
			t.Fatal("no notification within 10s")
		}
	}
}

// One replica at a time holds the retention lock.
func TestRetentionLockIsShared(t *testing.T) {
	t.Parallel()
	url := pgtest.Start(t)
	a, b := open(t, url), open(t, url)
	defer b.Close()
	unlock, ok, err := a.TryRetentionLock(t.Context())
	if err != nil || !ok {
		t.Fatalf("first lock: %v %v", ok, err)
	}
	if _, ok, err := b.TryRetentionLock(t.Context()); err != nil || ok {
		t.Fatalf("second replica got the lock held by the first: %v %v", ok, err)
	}
	unlock()
	unlockB, ok, err := b.TryRetentionLock(t.Context())
	if err != nil || !ok {
		t.Fatalf("lock after release: %v %v", ok, err)
	}
	unlockB()
}
