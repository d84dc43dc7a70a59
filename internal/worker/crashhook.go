//go:build faulthooks

package worker

import (
	"bytes"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
)

// The fault suite needs a job that kills its workerd every time, the way a
// trainer that exhausts workerd's memory or trips a bug in it would. Setting
// SIMPLETUNER_WORKERD_TEST_CRASH to "<when>:<marker>" makes workerd exit
// with status 70 for every job_submit whose config contains marker: when is
// "receive" (before the job is acknowledged) or "run" (once it has trained
// for a moment). The hook is built only into the fault suite's binaries
// (build tag faulthooks).
const crashHookEnv = "SIMPLETUNER_WORKERD_TEST_CRASH"

// crashRunAfter is how long a "run" crash lets the job train first: long
// enough for its start to be acknowledged.
const crashRunAfter = 700 * time.Millisecond

type crashHook struct {
	when   string // "receive" or "run"
	marker []byte
}

func crashHookFromEnv() *crashHook {
	when, marker, ok := strings.Cut(os.Getenv(crashHookEnv), ":")
	if !ok || marker == "" || (when != "receive" && when != "run") {
		return nil
	}
	return &crashHook{when: when, marker: []byte(marker)}
}

// fire crashes workerd now (receive) or soon (run) when ev is the marked job.
func (h *crashHook) fire(log *slog.Logger, when string, ev *protocol.JobSubmitEvent) {
	if h == nil || h.when != when || !bytes.Contains(ev.Config, h.marker) {
		return
	}
	crash := func() {
		log.Error("test hook: workerd crashes on this job", "hook", crashHookEnv, "job_id", ev.JobID, "attempt", ev.Attempt, "when", when)
		os.Exit(70)
	}
	if when == "run" {
		time.AfterFunc(crashRunAfter, crash)
		return
	}
	crash()
}
