package worker

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
)

// statusRecord is a terminal report waiting for the orchestrator's acknowledgement.
// It is on disk before the first send, so neither a network cut nor a
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
	// Fault is the GPU fault the attempt was stopped for.
	Fault *protocol.GPUFault `json:"fault,omitempty"`
	// Shutdown: the worker stopped the attempt because it was itself
	// stopped on purpose (see protocol.StatusReport).
	Shutdown bool `json:"shutdown,omitempty"`
}

func (r statusRecord) key() string { return fmt.Sprintf("%s-%d", r.JobID, r.Attempt) }

// journalName is the status journal in the spool directory.
const journalName = "reports.jsonl"

// compactAt is the journal size past which it is rewritten with only the
// waiting records, once they fill less than a quarter of it; an empty set of
// waiting records truncates it at once.
const compactAt = 1 << 20

// journalEntry is one line of the journal: a report put, or one dropped.
type journalEntry struct {
	Put  *statusRecord `json:"put,omitempty"`
	Done string        `json:"done,omitempty"`
}

// statusSpool keeps the waiting terminal reports in one append-only journal,
// <spool>/reports.jsonl, beside the jobs' <job>-<attempt>.log files. A report
// is one appended line and one fdatasync, never a new file: creating and
// deleting a file per job costs more than the rest of a short job's launch on
// some file systems. The journal is truncated whenever nothing waits and
// rewritten when it grows past compactAt.
type statusSpool struct {
	dir string

	mu       sync.Mutex
	f        *os.File // the journal, open for appending; nil until first used
	size     int64
	live     map[string]statusRecord
	lineLen  map[string]int64 // the journal bytes of each waiting record
	waiting  int64            // their sum
	loadErrs []error          // what the first read found wrong, told by the first list
	rewrites int              // how often the journal was rewritten (for tests)
}

func (s *statusSpool) journal() string { return filepath.Join(s.dir, journalName) }

// open reads the journal (and the .status files of a workerd that kept one
// file per report) and rewrites it with only the waiting records. A line
// cut short by a crash is dropped; a journal with any other unreadable line
// is kept aside as reports.jsonl.bad-<unix time>.
func (s *statusSpool) open() error {
	if s.f != nil {
		return nil
	}
	live := map[string]statusRecord{}
	errs := s.readJournal(live)
	legacy, legacyErrs := s.readLegacy(live)
	errs = append(errs, legacyErrs...)
	if err := s.rewrite(live); err != nil {
		return err
	}
	for _, name := range legacy {
		_ = os.Remove(name)
	}
	s.live, s.loadErrs = live, errs
	return nil
}

func (s *statusSpool) readJournal(live map[string]statusRecord) []error {
	data, err := os.ReadFile(s.journal())
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return []error{err}
	}
	// An append cut short by a crash or a full disk leaves a last line
	// without its newline: it was never acknowledged as spooled.
	data = data[:bytes.LastIndexByte(data, '\n')+1]
	var errs []error
	line := 0
	for text := range bytes.Lines(data) {
		line++
		var e journalEntry
		err := json.Unmarshal(text, &e)
		switch {
		case err == nil && e.Put != nil && e.Put.JobID != "" && e.Put.Status != "":
			live[e.Put.key()] = *e.Put
		case err == nil && e.Done != "":
			delete(live, e.Done)
		default:
			errs = append(errs, fmt.Errorf("%s:%d: not a status journal entry", s.journal(), line))
		}
	}
	if len(errs) > 0 {
		aside := fmt.Sprintf("%s.bad-%d", s.journal(), time.Now().Unix())
		if err := os.WriteFile(aside, data, 0o600); err == nil {
			errs = append(errs, fmt.Errorf("%s: a copy of the journal as it was is in %s", s.journal(), aside))
		}
	}
	return errs
}

// readLegacy adds the <job>-<attempt>.status files an earlier workerd
// wrote; unreadable ones are moved aside as .bad. It returns the files read.
func (s *statusSpool) readLegacy(live map[string]statusRecord) (read []string, errs []error) {
	names, _ := filepath.Glob(filepath.Join(s.dir, "*.status"))
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
		live[rec.key()] = rec
		read = append(read, name)
	}
	return read, errs
}

// rewrite replaces the journal by one holding the records of live, durably,
// and opens it for appending.
func (s *statusSpool) rewrite(live map[string]statusRecord) error {
	var buf bytes.Buffer
	lineLen := map[string]int64{}
	for _, rec := range sortedRecords(live) {
		line, err := json.Marshal(journalEntry{Put: &rec})
		if err != nil {
			return err
		}
		buf.Write(append(line, '\n'))
		lineLen[rec.key()] = int64(len(line) + 1)
	}
	tmp := s.journal() + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return err
	}
	if _, err = f.Write(buf.Bytes()); err == nil {
		err = f.Sync()
	}
	if err == nil {
		err = os.Rename(tmp, s.journal())
	}
	if err == nil {
		err = syncDir(s.dir)
	}
	if err != nil {
		f.Close()
		_ = os.Remove(tmp)
		return err
	}
	if _, err := f.Seek(0, io.SeekEnd); err != nil {
		f.Close()
		return err
	}
	if s.f != nil {
		s.f.Close()
	}
	s.f, s.size, s.lineLen, s.waiting = f, int64(buf.Len()), lineLen, int64(buf.Len())
	s.rewrites++
	return nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// appendEntry writes one line; with sync it is on disk before it returns. A
// line the disk took only in part is cut off again, so the next one starts
// on a line of its own.
func (s *statusSpool) appendEntry(e journalEntry, sync bool) (int64, error) {
	line, err := json.Marshal(e)
	if err != nil {
		return 0, err
	}
	line = append(line, '\n')
	if _, err := s.f.WriteAt(line, s.size); err != nil {
		_ = s.f.Truncate(s.size)
		return 0, err
	}
	if sync {
		if err := syscall.Fdatasync(int(s.f.Fd())); err != nil {
			_ = s.f.Truncate(s.size)
			return 0, err
		}
	}
	s.size += int64(len(line))
	return int64(len(line)), nil
}

// put spools rec durably.
func (s *statusSpool) put(rec statusRecord) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.open(); err != nil {
		return err
	}
	n, err := s.appendEntry(journalEntry{Put: &rec}, true)
	if err != nil {
		return err
	}
	s.live[rec.key()] = rec
	s.lineLen[rec.key()] += n
	s.waiting += n
	return nil
}

// list returns the waiting records, oldest first; the errors are what the
// first read of the journal found wrong.
func (s *statusSpool) list() ([]statusRecord, []error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.open(); err != nil {
		return nil, []error{err}
	}
	errs := s.loadErrs
	s.loadErrs = nil
	return sortedRecords(s.live), errs
}

func sortedRecords(m map[string]statusRecord) []statusRecord {
	out := make([]statusRecord, 0, len(m))
	for _, rec := range m {
		out = append(out, rec)
	}
	slices.SortFunc(out, func(a, b statusRecord) int { return a.Created.Compare(b.Created) })
	return out
}

// remove drops an acknowledged record and its attempt's log file (a shipper still
// reading it keeps its open descriptor; the lines are in the journal too). A
// drop that does not reach the disk costs at most one more send after a
// crash, which the orchestrator answers as already known.
func (s *statusSpool) remove(rec statusRecord) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	_ = os.Remove(filepath.Join(s.dir, rec.key()+".log"))
	if err := s.open(); err != nil {
		return err
	}
	if _, ok := s.live[rec.key()]; !ok {
		return nil
	}
	delete(s.live, rec.key())
	s.waiting -= s.lineLen[rec.key()]
	delete(s.lineLen, rec.key())
	switch {
	case len(s.live) == 0:
		if err := s.f.Truncate(0); err != nil {
			return err
		}
		s.size = 0
		return nil
	case s.size > compactAt && s.size > 4*s.waiting:
		return s.rewrite(s.live)
	}
	_, err := s.appendEntry(journalEntry{Done: rec.key()}, false)
	return err
}

// clean removes, at start-up (no job runs), log files whose attempt has no
// waiting report, so the spool does not grow without bound.
func (s *statusSpool) clean() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.open() != nil {
		return
	}
	tmps, _ := filepath.Glob(filepath.Join(s.dir, ".status-*")) // an earlier workerd's interrupted writes
	for _, name := range tmps {
		_ = os.Remove(name)
	}
	logs, _ := filepath.Glob(filepath.Join(s.dir, "*.log"))
	for _, name := range logs {
		if _, ok := s.live[strings.TrimSuffix(filepath.Base(name), ".log")]; !ok {
			_ = os.Remove(name)
		}
	}
}

// close releases the journal's descriptor.
func (s *statusSpool) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.f != nil {
		s.f.Close()
		s.f = nil
	}
}
