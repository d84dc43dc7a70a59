package orchestratord

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// errDatabaseInUse is why a second orchestrator on one SQLite file stops.
var errDatabaseInUse = errors.New("the SQLite database is in use by another simpletuner-orchestratord")

// lockDatabase holds <path>.lock for as long as the returned file is open, so
// that a second orchestratord (or vacuum) on the same embedded database is
// refused: SQLite serves one orchestrator, whose scheduler, streams and
// in-memory state assume no other one writes beside it. The lock goes with
// the process, however it ends; the file stays and names the last holder.
func lockDatabase(path string) (*os.File, error) {
	lockPath := path + ".lock"
	if err := os.MkdirAll(filepath.Dir(lockPath), 0o750); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(lockPath, os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("lock file: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		holder, _ := os.ReadFile(lockPath)
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			who := "another process"
			if pid := strings.TrimSpace(string(holder)); pid != "" {
				who = "process " + pid
			}
			return nil, fmt.Errorf("%w: %s holds %s. An embedded database serves one orchestrator: stop the other one, "+
				"or give this one another [paths] state_dir (replicas share PostgreSQL, not SQLite)", errDatabaseInUse, who, lockPath)
		}
		return nil, fmt.Errorf("lock file %s: %w", lockPath, err)
	}
	_ = f.Truncate(0)
	_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	return f, nil
}
