package worker

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"
)

func fmtSscan(s string, v *int) (int, error) { return fmt.Sscan(s, v) }

// spooledReports reads the status journal under stateDir as a restarted
// workerd would find it on disk: the waiting reports by attempt key.
func spooledReports(t *testing.T, stateDir string) map[string]statusRecord {
	t.Helper()
	live := map[string]statusRecord{}
	s := &statusSpool{dir: filepath.Join(stateDir, "spool")}
	for _, err := range s.readJournal(live) {
		t.Errorf("status journal: %v", err)
	}
	return live
}

// spooledReport is the waiting report of key, if there is one.
func spooledReport(t *testing.T, stateDir, key string) (statusRecord, bool) {
	t.Helper()
	rec, ok := spooledReports(t, stateDir)[key]
	return rec, ok
}

// waitSpooled waits until the report of key is on disk, or is not (want).
func waitSpooled(t *testing.T, stateDir, key string, want bool, timeout time.Duration) statusRecord {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		rec, ok := spooledReport(t, stateDir, key)
		if ok == want {
			return rec
		}
		if time.Now().After(deadline) {
			t.Fatalf("report %s spooled: %v after %s; want %v", key, ok, timeout, want)
		}
		time.Sleep(10 * time.Millisecond) // polling the file system
	}
}
