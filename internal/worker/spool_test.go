package worker

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/testutil"
)

func testRecord(job string, attempt int, created time.Time) statusRecord {
	return statusRecord{JobID: job, Attempt: attempt, Status: "completed", Created: created.UTC()}
}

// What was put and not removed is what a restarted workerd finds, oldest
// first; a journal with nothing waiting is empty.
func TestStatusJournalSurvivesRestart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	t0 := time.Now()
	s := &statusSpool{dir: dir}
	for i, job := range []string{"j_a", "j_b", "j_c"} {
		if err := s.put(testRecord(job, 1, t0.Add(time.Duration(i)*time.Second))); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.remove(testRecord("j_b", 1, t0)); err != nil {
		t.Fatal(err)
	}
	s.close()

	again := &statusSpool{dir: dir}
	recs, errs := again.list()
	if len(errs) > 0 || len(recs) != 2 || recs[0].JobID != "j_a" || recs[1].JobID != "j_c" {
		t.Fatalf("after a restart: %+v %v", recs, errs)
	}
	for _, rec := range recs {
		if err := again.remove(rec); err != nil {
			t.Fatal(err)
		}
	}
	if st, err := os.Stat(filepath.Join(dir, journalName)); err != nil || st.Size() != 0 {
		t.Fatalf("journal with nothing waiting: %v %v", st.Size(), err)
	}
	again.close()
}

// A line cut short (a crash during the append) is dropped without a word; a
// damaged line elsewhere is reported and the journal kept aside, and the
// readable records still count.
func TestStatusJournalDamage(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	t0 := time.Now()
	s := &statusSpool{dir: dir}
	if err := s.put(testRecord("j_a", 1, t0)); err != nil {
		t.Fatal(err)
	}
	s.close()
	path := filepath.Join(dir, journalName)
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = f.WriteString(`{"put":{"job_id":"j_b","attem`)
	f.Close()
	torn := &statusSpool{dir: dir}
	recs, errs := torn.list()
	if len(errs) > 0 || len(recs) != 1 || recs[0].JobID != "j_a" {
		t.Fatalf("torn last line: %+v %v", recs, errs)
	}
	// The next append starts on a line of its own.
	if err := torn.put(testRecord("j_c", 1, t0.Add(time.Second))); err != nil {
		t.Fatal(err)
	}
	torn.close()

	data, _ := os.ReadFile(path)
	if err := os.WriteFile(path, append([]byte("garbage\n"), data...), 0o600); err != nil {
		t.Fatal(err)
	}
	damaged := &statusSpool{dir: dir}
	recs, errs = damaged.list()
	if len(recs) != 2 || len(errs) != 2 || !strings.Contains(errs[0].Error(), journalName+":1:") || !strings.Contains(errs[1].Error(), ".bad-") {
		t.Fatalf("damaged line: %+v %v", recs, errs)
	}
	if aside, _ := filepath.Glob(path + ".bad-*"); len(aside) != 1 {
		t.Fatalf("kept aside: %v", aside)
	}
	damaged.close()
}

// The one-file-per-report spool of an earlier workerd is taken over: its
// reports are sent like any, the files go once they are in the journal.
func TestStatusJournalTakesOverStatusFiles(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	legacy := `{"job_id":"j_old","attempt":2,"status":"failed","error":"boom","created":"2026-11-20T10:00:00Z"}`
	if err := os.WriteFile(filepath.Join(dir, "j_old-2.status"), []byte(legacy), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "j_bad-1.status"), []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	s := &statusSpool{dir: dir}
	recs, errs := s.list()
	if len(recs) != 1 || recs[0].key() != "j_old-2" || recs[0].Error != "boom" || len(errs) != 1 {
		t.Fatalf("taken over: %+v %v", recs, errs)
	}
	if _, err := os.Stat(filepath.Join(dir, "j_old-2.status")); !os.IsNotExist(err) {
		t.Errorf("the taken-over file is still there: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "j_bad-1.bad")); err != nil {
		t.Errorf("the unreadable file was not moved aside: %v", err)
	}
	s.close()
	again := &statusSpool{dir: dir}
	if recs, _ := again.list(); len(recs) != 1 || recs[0].key() != "j_old-2" {
		t.Fatalf("after the take-over, from the journal: %+v", recs)
	}
	again.close()
}

// A journal grown past compactAt is rewritten with only what waits, and not
// again until it has grown well past that.
func TestStatusJournalCompacts(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := &statusSpool{dir: dir}
	t0 := time.Now()
	keep := testRecord("j_keep", 1, t0)
	if err := s.put(keep); err != nil {
		t.Fatal(err)
	}
	pad := strings.Repeat("x", 4096)
	for i := 0; s.size <= compactAt; i++ {
		rec := testRecord("j_churn", i, t0)
		rec.Error = pad
		if err := s.put(rec); err != nil {
			t.Fatal(err)
		}
	}
	// Dropping the last churned record finds the journal too large.
	for i := 0; ; i++ {
		if _, ok := s.live[testRecord("j_churn", i, t0).key()]; !ok {
			break
		}
		if err := s.remove(testRecord("j_churn", i, t0)); err != nil {
			t.Fatal(err)
		}
	}
	// One rewrite on opening, one compaction.
	if s.size >= compactAt || s.rewrites != 2 {
		t.Fatalf("journal of %d bytes after compaction; %d rewrites", s.size, s.rewrites)
	}
	s.close()
	again := &statusSpool{dir: dir}
	if recs, _ := again.list(); len(recs) != 1 || recs[0].key() != keep.key() {
		t.Fatalf("after compaction: %+v", recs)
	}
	again.close()
}

// A rewrite of the journal that the disk cannot take (it is full) fails and
// leaves the journal as it was: the reports it holds are still there once
// the disk has room again.
func TestStatusJournalRewriteOnAFullDisk(t *testing.T) {
	t.Parallel()
	dir := testutil.SmallFS(t, "256k")
	rec := testRecord("j_full", 1, time.Now())
	rec.Error = strings.Repeat("the trainer's last words. ", 2000) // 50 KiB: more than a page
	s := &statusSpool{dir: dir}
	if err := s.put(rec); err != nil {
		t.Fatal(err)
	}
	s.close()
	journal := filepath.Join(dir, journalName)
	before, err := os.ReadFile(journal)
	if err != nil {
		t.Fatal(err)
	}
	filler := testutil.Fill(t, dir)

	full := &statusSpool{dir: dir} // a restart rewrites the journal
	if recs, errs := full.list(); len(errs) != 1 || !errors.Is(errs[0], syscall.ENOSPC) || len(recs) != 0 {
		t.Fatalf("reading the journal on a full disk: %d records, errors %v; want ENOSPC", len(recs), errs)
	}
	full.close()
	if after, _ := os.ReadFile(journal); !bytes.Equal(after, before) {
		t.Fatalf("the failed rewrite changed the journal: %d bytes, was %d", len(after), len(before))
	}
	if _, err := os.Stat(journal + ".tmp"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the failed rewrite left its temporary file: %v", err)
	}

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	again := &statusSpool{dir: dir}
	defer again.close()
	recs, errs := again.list()
	if len(errs) > 0 || len(recs) != 1 || recs[0].JobID != rec.JobID || recs[0].Error != rec.Error {
		t.Fatalf("once the disk has room: %d records, errors %v", len(recs), errs)
	}
}
