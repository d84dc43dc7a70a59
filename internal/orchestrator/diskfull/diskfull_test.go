package diskfull

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/simpletuner/simpletuner-orchestration/internal/store"
)

func TestIsNoSpace(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{store.ErrDiskFull, true},
		{fmt.Errorf("write wal: %w", syscall.ENOSPC), true},
		{fmt.Errorf("put: %w", syscall.EDQUOT), true},
		{syscall.EIO, false},
		{errors.New("no space left on device"), false}, // only typed errors count
	} {
		if got := IsNoSpace(c.err); got != c.want {
			t.Errorf("IsNoSpace(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}

// A full disk is entered once (one error line, with its path), shown by its
// role (never its path), and left only when its filesystem has room and a
// real write succeeds.
func TestFullDiskStateIsEnteredOnceAndLeftWhenAWriteWorks(t *testing.T) {
	var logged bytes.Buffer
	s := New(slog.New(slog.NewTextHandler(&logged, nil)))
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "orchestrator.db"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	s.SetPaths(filepath.Join(dir, "orchestrator.db"), filepath.Join(dir, "missing", "artifacts"))
	for range 3 {
		s.Note(Database, store.ErrDiskFull)
	}
	if n := strings.Count(logged.String(), "disk full: writes fail"); n != 1 || !strings.Contains(logged.String(), "orchestrator.db") {
		t.Fatalf("%d disk-full lines, want 1 naming the path:\n%s", n, logged.String())
	}
	notReady, degraded := s.Problem()
	if !strings.Contains(notReady, "the database's disk has no space left") || strings.Contains(notReady, dir) || degraded != "" || s.Gauge() != 1 {
		t.Fatalf("problem %q / %q, gauge %d", notReady, degraded, s.Gauge())
	}
	s.Note(Artifacts, syscall.ENOSPC)
	if _, degraded = s.Problem(); !strings.Contains(degraded, "the artifacts' disk has no space left") {
		t.Fatalf("degraded %q", degraded)
	}

	ctx := context.Background()
	probed := map[Disk]int{}
	failing := func(_ context.Context, d Disk) error { probed[d]++; return syscall.ENOSPC }
	s.check(ctx, failing)
	if notReady, _ := s.Problem(); notReady == "" {
		t.Fatal("left the full state while a write still fails")
	}
	// The artifacts' path cannot be read: its free space is unknown, so it
	// is not even probed.
	if probed[Database] != 1 || probed[Artifacts] != 0 {
		t.Fatalf("probes %v", probed)
	}
	working := func(_ context.Context, d Disk) error { probed[d]++; return nil }
	s.check(ctx, working)
	notReady, degraded = s.Problem()
	if notReady != "" || degraded == "" || s.Gauge() != 1 {
		t.Fatalf("after the database's disk has room: %q / %q, gauge %d", notReady, degraded, s.Gauge())
	}
	if !strings.Contains(logged.String(), "disk has space again") {
		t.Fatalf("no recovery line:\n%s", logged.String())
	}
	s.SetPaths("", "") // not local: only the probe decides
	s.check(ctx, working)
	if _, degraded = s.Problem(); degraded != "" || s.Gauge() != 0 {
		t.Fatalf("after the artifacts' disk has room: %q, gauge %d", degraded, s.Gauge())
	}
}
