package worker

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// swapFile points the spool at another file, as if its disk filled up
// (/dev/full refuses every write with ENOSPC) or had room again.
func swapFile(s *logSpool, f *os.File) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.f, s.lastTry = f, time.Time{}
}

// While state_dir is full the job's output waits in memory and reaches the
// file, in order, once there is room; the journal says so once each way.
func TestLogSpoolRidesOutAFullDisk(t *testing.T) {
	t.Parallel()
	devFull, err := os.OpenFile("/dev/full", os.O_WRONLY, 0)
	if err != nil {
		t.Skipf("no /dev/full: %v", err)
	}
	defer devFull.Close()
	var journal bytes.Buffer
	path := filepath.Join(t.TempDir(), "j-1.log")
	s := newLogSpool(path, 0, slog.New(slog.NewTextHandler(&journal, nil)))
	_, _ = s.Write([]byte("before\n"))
	real := s.f
	swapFile(s, devFull)
	for _, line := range []string{"during 1\n", "during 2\n", "during 3\n"} {
		if n, err := s.Write([]byte(line)); err != nil || n != len(line) {
			t.Fatalf("Write on a full disk = %d, %v; the job's pipe must never see an error", n, err)
		}
	}
	if size, _ := s.state(); size != int64(len("before\n")) {
		t.Fatalf("size on a full disk %d: only what reached the file may be shipped", size)
	}
	swapFile(s, real)
	if size, _ := s.state(); size != int64(len("before\nduring 1\nduring 2\nduring 3\n")) {
		t.Fatalf("size once there is room again: %d", size)
	}
	_, _ = s.Write([]byte("after\n"))
	_ = s.Close()
	got, _ := os.ReadFile(path)
	if string(got) != "before\nduring 1\nduring 2\nduring 3\nafter\n" {
		t.Fatalf("spool %q", got)
	}
	j := journal.String()
	if strings.Count(j, "cannot spool job output") != 1 || strings.Count(j, "job output is spooled again") != 1 {
		t.Fatalf("journal:\n%s", j)
	}
	for _, line := range []string{"during 1", "during 2", "during 3"} {
		if !strings.Contains(j, line) {
			t.Errorf("journal lacks %q", line)
		}
	}
}

// Beyond what memory holds, output is lost, and the log says how much where
// it is missing; the limit still counts every byte.
func TestLogSpoolFullDiskOverflow(t *testing.T) {
	t.Parallel()
	devFull, err := os.OpenFile("/dev/full", os.O_WRONLY, 0)
	if err != nil {
		t.Skipf("no /dev/full: %v", err)
	}
	defer devFull.Close()
	path := filepath.Join(t.TempDir(), "j-1.log")
	s := newLogSpool(path, 0, slog.New(slog.DiscardHandler))
	swapFile(s, devFull)
	block := bytes.Repeat([]byte("x"), 1<<20)
	for range 10 { // 10 MiB against 8 MiB of room
		_, _ = s.Write(block)
	}
	swapFile(s, nil) // room again: the spool makes its file
	_, _ = s.Write([]byte("\nlast line\n"))
	_ = s.Close()
	got, _ := os.ReadFile(path)
	want := "\n[simpletuner-workerd: 2097152 bytes of output lost: state_dir was full]\n\nlast line\n"
	if len(got) != heldMax+len(want) || !bytes.HasSuffix(got, []byte(want)) {
		t.Fatalf("spool of %d bytes ends %q", len(got), got[max(0, len(got)-120):])
	}
	// A job still running at Close with the disk full: what is held is
	// dropped with a warning, what is on disk stays.
	var journal bytes.Buffer
	s = newLogSpool(filepath.Join(t.TempDir(), "j-2.log"), 0, slog.New(slog.NewTextHandler(&journal, nil)))
	_, _ = s.Write([]byte("kept\n"))
	swapFile(s, devFull)
	_, _ = s.Write([]byte("held\n"))
	_ = s.Close()
	if !strings.Contains(journal.String(), "could not be spooled before the job ended") {
		t.Fatalf("journal:\n%s", journal.String())
	}
}
