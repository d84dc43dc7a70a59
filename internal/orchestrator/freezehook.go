//go:build faulthooks

package orchestrator

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"time"
)

// The fault suite checks that a stuck scheduler stops the systemd watchdog
// pings. With SIMPLETUNER_ORCHESTRATORD_TEST_FREEZE naming a file, every
// scheduler pass blocks, holding the pass lock, for as long as that file
// exists: the loop looks exactly like one stuck on a lock or a query. The
// hook is built only into the fault suite's binaries (build tag faulthooks).
const freezeHookEnv = "SIMPLETUNER_ORCHESTRATORD_TEST_FREEZE"

func freezeFileFromEnv() string { return os.Getenv(freezeHookEnv) }

// freezeWhileFileExists blocks while the hook's file exists (or until ctx ends).
func (s *Server) freezeWhileFileExists(ctx context.Context) {
	if s.freezeFile == "" {
		return
	}
	logged := false
	for {
		if _, err := os.Stat(s.freezeFile); errors.Is(err, fs.ErrNotExist) {
			return
		}
		if !logged {
			s.log.Warn("test hook: the scheduler loop is frozen", "hook", freezeHookEnv, "file", s.freezeFile)
			logged = true
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(50 * time.Millisecond):
		}
	}
}
