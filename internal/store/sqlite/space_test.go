package sqlite

import (
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/audit"
	"github.com/simpletuner/simpletuner-orchestration/internal/lifecycle"
	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
	"github.com/simpletuner/simpletuner-orchestration/internal/store"
)

func autoVacuum(t *testing.T, db *sql.DB) int {
	t.Helper()
	var mode int
	if err := db.QueryRow(`PRAGMA auto_vacuum`).Scan(&mode); err != nil {
		t.Fatal(err)
	}
	return mode
}

// A new database is in incremental auto-vacuum mode, and retention's
// deletions followed by Reclaim shrink the file.
func TestReclaimShrinksTheFile(t *testing.T) {
	s := openTemp(t)
	defer s.Close()
	ctx := t.Context()
	if m := autoVacuum(t, s.DB()); m != incremental {
		t.Fatalf("auto_vacuum = %d, want %d (incremental)", m, incremental)
	}
	w := store.Worker{ID: protocol.NewWorkerID(), Status: protocol.WorkerIdle, GPUInfo: store.ReadGPUInfo([]byte(`{}`))}
	if err := s.CreateWorker(ctx, w, "h", nil); err != nil {
		t.Fatal(err)
	}
	chunk := []byte(strings.Repeat("x", 64<<10))
	var ids []string
	for i := range 40 {
		j, err := s.InsertJob(ctx, store.Job{ConfigName: fmt.Sprint(i)}, nil)
		if err != nil {
			t.Fatal(err)
		}
		j, _, err = s.ClaimJob(ctx, store.ClaimRequest{WorkerID: w.ID, JobID: j.ID, AckDeadline: time.Now().Add(time.Minute)})
		if err != nil {
			t.Fatal(err)
		}
		for k := range 4 {
			if _, _, err := s.AppendLog(ctx, j.ID, 1, int64(k*len(chunk)), chunk, 0); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := s.TransitionJob(ctx, store.JobTransition{JobID: j.ID, ExpectAttempt: 1, From: protocol.JobDispatched,
			Step: lifecycle.Step{To: protocol.JobCompleted, By: lifecycle.Report, EndAttempt: protocol.OutcomeCompleted}}); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, j.ID)
	}
	if _, err := s.DB().Exec(`PRAGMA wal_checkpoint(TRUNCATE)`); err != nil {
		t.Fatal(err)
	}
	before, err := s.Sizes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := s.DeleteJobs(ctx, ids, time.Now().Add(time.Hour)); err != nil || n != len(ids) {
		t.Fatalf("DeleteJobs = %d, %v", n, err)
	}
	mid, err := s.Sizes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if mid.FreeBytes < 8<<20 {
		t.Fatalf("free bytes after deleting 10 MiB of logs: %d", mid.FreeBytes)
	}
	if err := s.Reclaim(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := s.DB().Exec(`PRAGMA wal_checkpoint(TRUNCATE)`); err != nil {
		t.Fatal(err)
	}
	after, err := s.Sizes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("file %d → %d bytes; free %d → %d", before.FileBytes, after.FileBytes, mid.FreeBytes, after.FreeBytes)
	if after.FreeBytes != 0 || after.FileBytes > before.FileBytes-8<<20 {
		t.Fatalf("file %d → %d bytes, %d free: not reclaimed", before.FileBytes, after.FileBytes, after.FreeBytes)
	}
}

// A database made before incremental auto-vacuum is switched at open when
// small; Vacuum switches one of any size.
func TestOldDatabaseSwitchesToIncremental(t *testing.T) {
	for _, how := range []string{"open", "vacuum"} {
		t.Run(how, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "old.db")
			s, err := Open(t.Context(), path, nil)
			if err != nil {
				t.Fatal(err)
			}
			j, err := s.InsertJob(t.Context(), store.Job{ConfigName: "kept"}, nil)
			if err != nil {
				t.Fatal(err)
			}
			// Make it an old database: no auto-vacuum.
			for _, q := range []string{`PRAGMA auto_vacuum = NONE`, `VACUUM`} {
				if _, err := s.DB().Exec(q); err != nil {
					t.Fatal(err)
				}
			}
			if m := autoVacuum(t, s.DB()); m != 0 {
				t.Fatalf("fixture: auto_vacuum %d", m)
			}
			s.Close()
			if how == "vacuum" {
				if _, _, err := Vacuum(t.Context(), path); err != nil {
					t.Fatal(err)
				}
			}
			s, err = Open(t.Context(), path, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if m := autoVacuum(t, s.DB()); m != incremental {
				t.Fatalf("auto_vacuum %d after %s", m, how)
			}
			if got, err := s.GetJob(t.Context(), j.ID); err != nil || got.ConfigName != "kept" {
				t.Fatalf("job after switching: %+v %v", got, err)
			}
		})
	}
	if _, _, err := Vacuum(t.Context(), filepath.Join(t.TempDir(), "missing.db")); !os.IsNotExist(unwrapAll(err)) {
		t.Fatalf("Vacuum of a missing file: %v", err)
	}
}

func unwrapAll(err error) error {
	for {
		u, ok := err.(interface{ Unwrap() error })
		if !ok {
			return err
		}
		err = u.Unwrap()
	}
}

// Audit retention refuses to delete records that do not verify, and deletes
// nothing then.
func TestPruneAuditRefusesABrokenChain(t *testing.T) {
	s := openTemp(t)
	defer s.Close()
	ctx := t.Context()
	for i := range 5 {
		r := audit.New("system", "", "test.event", "test", fmt.Sprint(i), audit.Success, nil)
		r.Time = time.Date(2030, 1, 1, 0, i, 0, 0, time.UTC)
		if err := s.AppendAudit(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.DB().Exec(`UPDATE audit SET actor = 'someone else' WHERE seq = 3`); err != nil {
		t.Fatal(err)
	}
	n, cp, err := s.PruneAudit(ctx, time.Date(2031, 1, 1, 0, 0, 0, 0, time.UTC), 100)
	if err == nil || !strings.Contains(err.Error(), "record 3") || n != 0 || cp.Seq != 0 {
		t.Fatalf("PruneAudit over a tampered record = %d, %+v, %v", n, cp, err)
	}
	recs, err := s.ListAudit(ctx, 0, 0)
	if err != nil || len(recs) != 5 {
		t.Fatalf("records after a refused prune: %d, %v", len(recs), err)
	}
}
