// Package diskfull treats a full disk as a state, not a string of failures.
// When a write fails for lack of space the orchestrator enters the state for
// that disk (the database's, or the artifacts'): it logs one error saying so,
// /readyz names it, and every write that fails the same way is answered 507
// with a detail that says what happened. Only a full database disk makes
// /readyz answer 503: with the artifacts' disk full everything but uploads
// works, and taking the orchestrator out of a load balancer's rotation would
// stop that too. Reads go on, and so do heartbeats (kept in memory while they
// cannot be written). A watcher checks every second whether space is back
// (enough free on the disk's filesystem, and a small write succeeding) and
// leaves the state by itself.
package diskfull

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/simpletuner/simpletuner-orchestration/internal/store"
)

// Disk is a disk the orchestrator writes to, by its role.
type Disk string

const (
	Database  Disk = "database"
	Artifacts Disk = "artifacts"
)

// name names the disk in messages anyone may read: its role, never its path.
func (d Disk) name() string {
	if d == Artifacts {
		return "the artifacts' disk"
	}
	return "the database's disk"
}

// spaceNeeded is the free space a watched filesystem must have again before
// its disk counts as usable: room for the write-ahead log to grow and be
// checkpointed, not just for the next small row.
const spaceNeeded = 4 << 20

// watchEvery is how often the watcher checks a full disk.
const watchEvery = time.Second

// IsNoSpace reports whether err says a disk is full.
func IsNoSpace(err error) bool {
	return errors.Is(err, store.ErrDiskFull) || errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT)
}

// State tracks the full disks. Safe for concurrent use.
type State struct {
	log   *slog.Logger
	mu    sync.Mutex
	full  map[Disk]fullSince
	paths map[Disk]string // a path on the disk's filesystem ("" when not local)
}

type fullSince struct {
	since time.Time
	err   string
}

// New returns a state with no disk full.
func New(log *slog.Logger) *State {
	return &State{log: log, full: map[Disk]fullSince{}, paths: map[Disk]string{}}
}

// SetPaths names a path on the filesystem of the database (when it is a
// local file) and of the artifacts (when local), for the watcher's
// free-space check and for the log.
func (s *State) SetPaths(database, artifacts string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.paths[Database], s.paths[Artifacts] = database, artifacts
}

// Note records disk as full, logging once (with its path) when it becomes so.
func (s *State) Note(disk Disk, err error) {
	s.mu.Lock()
	_, already := s.full[disk]
	if !already {
		s.full[disk] = fullSince{since: time.Now(), err: err.Error()}
	}
	path := s.paths[disk]
	s.mu.Unlock()
	if !already {
		s.log.Error("disk full: writes fail until space is freed; reads and heartbeats go on, /readyz reports not ready",
			"disk", string(disk), "path", path, "err", err)
	}
}

// Problem is /readyz's reason while a disk is full ("" when none is):
// notReady for the database's disk, degraded for the artifacts'.
func (s *State) Problem() (notReady, degraded string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if f, ok := s.full[Database]; ok {
		notReady = fmt.Sprintf("disk full: %s has no space left since %s; writes fail until space is freed",
			Database.name(), f.since.UTC().Format(time.RFC3339))
	}
	if f, ok := s.full[Artifacts]; ok {
		degraded = fmt.Sprintf("disk full: %s has no space left since %s; uploads are refused until space is freed",
			Artifacts.name(), f.since.UTC().Format(time.RFC3339))
	}
	return notReady, degraded
}

// Gauge is 1 while any disk is full, else 0.
func (s *State) Gauge() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.full) > 0 {
		return 1
	}
	return 0
}

// Watch leaves the full state of each disk once it has room again: enough
// free space on its filesystem (when its path is known) and probe, a small
// real write, succeeding. It returns when ctx ends.
func (s *State) Watch(ctx context.Context, probe func(context.Context, Disk) error) {
	t := time.NewTicker(watchEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		s.check(ctx, probe)
	}
}

func (s *State) check(ctx context.Context, probe func(context.Context, Disk) error) {
	type check struct {
		disk Disk
		path string
	}
	s.mu.Lock()
	var full []check
	for disk := range s.full {
		full = append(full, check{disk, s.paths[disk]})
	}
	s.mu.Unlock()
	for _, c := range full {
		if c.path != "" {
			if free, err := freeBytes(c.path); err != nil || free < spaceNeeded {
				continue
			}
		}
		if err := probe(ctx, c.disk); err != nil {
			continue
		}
		s.mu.Lock()
		f := s.full[c.disk]
		delete(s.full, c.disk)
		s.mu.Unlock()
		s.log.Info("disk has space again: writes work", "disk", string(c.disk), "path", c.path,
			"full_for", time.Since(f.since).Round(time.Second).String())
	}
}

// freeBytes is the space an unprivileged writer may still use on path's filesystem.
func freeBytes(path string) (int64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return 0, err
	}
	return int64(st.Bavail) * int64(st.Bsize), nil
}
