package worker

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
)

// statusRecord is a terminal report waiting for the orchestrator's acknowledgement.
// It is written to disk before the first send, so neither a network cut nor a
// restart of workerd loses how a job ended.
type statusRecord struct {
	JobID   string `json:"job_id"`
	Attempt int    `json:"attempt"`
	Status  string `json:"status"`
	Error   string `json:"error,omitempty"`
	// AfterRegister holds the report back until the worker has registered again:
	// a self-fenced attempt must first be reconciled as lost (and requeued) by the
	// orchestrator, or "cancelled" would end a job nobody cancelled.
	AfterRegister bool      `json:"after_register,omitempty"`
	Created       time.Time `json:"created"`
	// Usage is what the attempt's processes used, when it ran.
	Usage *protocol.Usage `json:"usage,omitempty"`
}

func (r statusRecord) key() string { return fmt.Sprintf("%s-%d", r.JobID, r.Attempt) }

// statusSpool is the directory <state_dir>/spool holding <job>-<attempt>.status
// files (and the .log files of the same attempts).
type statusSpool struct {
	dir string
	mu  sync.Mutex
}

func (s *statusSpool) path(key string) string { return filepath.Join(s.dir, key+".status") }

// put writes rec atomically (temp file, fsync, rename).
func (s *statusSpool) put(rec statusRecord) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, err := json.MarshalIndent(rec, "", "  ")
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(s.dir, ".status-*")
	if err != nil {
		return err
	}
	if _, err := tmp.Write(append(b, '\n')); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return err
	}
	if err := tmp.Close(); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	return os.Rename(tmp.Name(), s.path(rec.key()))
}

// list returns the waiting records, oldest first. Unreadable files are skipped.
func (s *statusSpool) list() ([]statusRecord, []error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	names, err := filepath.Glob(filepath.Join(s.dir, "*.status"))
	if err != nil {
		return nil, []error{err}
	}
	var (
		out  []statusRecord
		errs []error
	)
	for _, name := range names {
		b, err := os.ReadFile(name)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		var rec statusRecord
		if err := json.Unmarshal(b, &rec); err != nil || rec.JobID == "" || rec.Status == "" {
			errs = append(errs, fmt.Errorf("%s: not a status record; moved aside", name))
			_ = os.Rename(name, strings.TrimSuffix(name, ".status")+".bad")
			continue
		}
		out = append(out, rec)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Created.Before(out[j].Created) })
	return out, errs
}

// remove drops an acknowledged record and its attempt's log file (a shipper still
// reading it keeps its open descriptor; the lines are in the journal too).
func (s *statusSpool) remove(rec statusRecord) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	_ = os.Remove(filepath.Join(s.dir, rec.key()+".log"))
	err := os.Remove(s.path(rec.key()))
	if os.IsNotExist(err) {
		return nil
	}
	return err
}

// clean removes, at start-up (no job runs), log files whose attempt has no
// waiting report and temporary files of interrupted writes, so the spool does not
// grow without bound.
func (s *statusSpool) clean() {
	s.mu.Lock()
	defer s.mu.Unlock()
	tmps, _ := filepath.Glob(filepath.Join(s.dir, ".status-*"))
	for _, name := range tmps {
		_ = os.Remove(name)
	}
	logs, _ := filepath.Glob(filepath.Join(s.dir, "*.log"))
	for _, name := range logs {
		if _, err := os.Stat(strings.TrimSuffix(name, ".log") + ".status"); os.IsNotExist(err) {
			_ = os.Remove(name)
		}
	}
}
