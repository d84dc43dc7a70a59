package orchestrator

import (
	"bytes"
	"context"
	"errors"

	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator/diskfull"
	"github.com/simpletuner/simpletuner-orchestration/internal/store"
)

// A full disk is a state (see package diskfull); this file answers requests
// while it lasts and gives the watcher its probes.

// SetDiskPaths names a path on the filesystem of the database (when it is a
// local file) and of the artifacts (when local), for the watcher's free-space
// check and for messages.
func (s *Server) SetDiskPaths(database, artifacts string) { s.disk.SetPaths(database, artifacts) }

// runDiskWatch leaves the full state of each disk once it has room again.
func (s *Server) runDiskWatch(ctx context.Context) { s.disk.Watch(ctx, s.probeWrite) }

// probeName is the object the artifacts probe writes and deletes: not a
// job's (job ids never start with a dot), so no listing shows it.
const probeName = ".space-probe"

// probeWrite makes a small real write to disk and undoes it.
func (s *Server) probeWrite(ctx context.Context, disk diskfull.Disk) error {
	if disk == diskfull.Database {
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

// logDiskFullOnce is used where a disk-full error is seen outside a request
// (a background write): it enters the state like a request would.
func (s *Server) logDiskFullOnce(err error) bool {
	if !errors.Is(err, store.ErrDiskFull) {
		return false
	}
	s.disk.Note(diskfull.Database, err)
	return true
}
