package orchestrator

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
	"github.com/simpletuner/simpletuner-orchestration/internal/store"
)

// A full disk is a state, not a string of failures. When a write fails for
// lack of space the orchestrator enters it for that disk (the database's, or
// the artifacts'): it logs one error saying so, /readyz names it, and every
// write that fails the same way is answered 507 with a detail that says what
// happened. Only a full database disk makes /readyz answer 503: with the
// artifacts' disk full everything but uploads works, and taking the
// orchestrator out of a load balancer's rotation would stop that too. Reads go on, and so do heartbeats: the liveness a
// heartbeat brings is kept in memory when it cannot be written. A watcher
// checks every second whether space is back (enough free on the watched
// paths, and a small write succeeding) and leaves the state by itself.

// Disks the orchestrator writes to.
const (
	diskDatabase  = "database"
	diskArtifacts = "artifacts"
)

// diskNames name the disks in messages.
var diskNames = map[string]string{diskDatabase: "the database's disk", diskArtifacts: "the artifacts' disk"}

// spaceNeeded is the free space a watched filesystem must have again before
// its disk counts as usable: room for the write-ahead log to grow and be
// checkpointed, not just for the next small row.
const spaceNeeded = 4 << 20

// diskWatchEvery is how often the watcher checks a full disk.
const diskWatchEvery = time.Second

// diskState tracks the full disks.
type diskState struct {
	mu    sync.Mutex
	full  map[string]diskFull
	paths map[string]string // disk → a path on its filesystem ("" when not local)
}

type diskFull struct {
	since time.Time
	err   string
}

func (d *diskState) init() {
	d.full, d.paths = map[string]diskFull{}, map[string]string{}
}

// SetDiskPaths names a path on the filesystem of the database (when it is a
// local file) and of the artifacts (when local), for the watcher's free-space
// check and for messages.
func (s *Server) SetDiskPaths(database, artifacts string) {
	s.disk.mu.Lock()
	defer s.disk.mu.Unlock()
	s.disk.paths[diskDatabase], s.disk.paths[diskArtifacts] = database, artifacts
}

// isNoSpace reports whether err says a disk is full.
func isNoSpace(err error) bool {
	return errors.Is(err, store.ErrDiskFull) || errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT)
}

// diskFullError enters the full state for disk and returns the 507 answer.
// The answer names the disk by its role, not its path: paths stay in the log,
// which has the path the one time the state is entered.
func (s *Server) diskFullError(disk string, err error) *apiError {
	s.noteDiskFull(disk, err)
	if disk == diskArtifacts {
		return errorf(http.StatusInsufficientStorage, protocol.CodeInsufficientStorage,
			"no space left on the disk that keeps artifacts; the upload was not stored. Uploads work again once space is freed")
	}
	return errorf(http.StatusInsufficientStorage, protocol.CodeInsufficientStorage,
		"no space left on the database's disk; nothing was changed. Writes are refused until space is freed; reads still work")
}

// noteDiskFull records disk as full, logging once (with its path) when it
// becomes so.
func (s *Server) noteDiskFull(disk string, err error) {
	d := &s.disk
	d.mu.Lock()
	_, already := d.full[disk]
	if !already {
		d.full[disk] = diskFull{since: time.Now(), err: err.Error()}
	}
	path := d.paths[disk]
	d.mu.Unlock()
	if !already {
		s.log.Error("disk full: writes fail until space is freed; reads and heartbeats go on, /readyz reports not ready",
			"disk", disk, "path", path, "err", err)
	}
}

// problem is /readyz's reason while a disk is full ("" when none is):
// notReady for the database's disk, degraded for the artifacts'.
func (d *diskState) problem() (notReady, degraded string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	// Anyone may read /readyz: the disk's role, never its path.
	if f, ok := d.full[diskDatabase]; ok {
		notReady = fmt.Sprintf("disk full: %s has no space left since %s; writes fail until space is freed",
			diskNames[diskDatabase], f.since.UTC().Format(time.RFC3339))
	}
	if f, ok := d.full[diskArtifacts]; ok {
		degraded = fmt.Sprintf("disk full: %s has no space left since %s; uploads are refused until space is freed",
			diskNames[diskArtifacts], f.since.UTC().Format(time.RFC3339))
	}
	return notReady, degraded
}

func (d *diskState) fullGauge() int64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.full) > 0 {
		return 1
	}
	return 0
}

// runDiskWatch leaves the full state of each disk once it has room again.
func (s *Server) runDiskWatch(ctx context.Context) {
	t := time.NewTicker(diskWatchEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		s.checkDisks(ctx)
	}
}

func (s *Server) checkDisks(ctx context.Context) {
	d := &s.disk
	d.mu.Lock()
	type check struct{ disk, path string }
	var full []check
	for disk := range d.full {
		full = append(full, check{disk, d.paths[disk]})
	}
	d.mu.Unlock()
	for _, c := range full {
		if c.path != "" {
			if free, err := freeBytes(c.path); err != nil || free < spaceNeeded {
				continue
			}
		}
		if err := s.probeWrite(ctx, c.disk); err != nil {
			continue
		}
		d.mu.Lock()
		f := d.full[c.disk]
		delete(d.full, c.disk)
		d.mu.Unlock()
		s.log.Info("disk has space again: writes work", "disk", c.disk, "path", c.path,
			"full_for", time.Since(f.since).Round(time.Second).String())
	}
}

// probeName is the object the artifacts probe writes and deletes: not a
// job's (job ids never start with a dot), so no listing shows it.
const probeName = ".space-probe"

// probeWrite makes a small real write to disk and undoes it.
func (s *Server) probeWrite(ctx context.Context, disk string) error {
	if disk == diskDatabase {
		return s.store.ProbeWrite(ctx)
	}
	a := s.artifacts.Load()
	if a == nil {
		return nil
	}
	b := a.Backend()
	if err := b.Put(ctx, probeName, bytes.NewReader(make([]byte, 64<<10)), func() error { return nil }); err != nil {
		return err
	}
	return b.Delete(ctx, probeName)
}

// freeBytes is the space an unprivileged writer may still use on path's filesystem.
func freeBytes(path string) (int64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return 0, err
	}
	return int64(st.Bavail) * int64(st.Bsize), nil
}

// logDiskFullOnce is used where a disk-full error is seen outside a request
// (a background write): it enters the state like a request would.
func (s *Server) logDiskFullOnce(err error) bool {
	if !errors.Is(err, store.ErrDiskFull) {
		return false
	}
	s.noteDiskFull(diskDatabase, err)
	return true
}
