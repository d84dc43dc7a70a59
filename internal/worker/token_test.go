package worker

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
	"github.com/simpletuner/simpletuner-orchestration/internal/testutil"
)

// fileTokenSource reads a token file the way workerd's configuration does.
func fileTokenSource(path string) func() (string, string, error) {
	return func() (string, string, error) {
		b, err := os.ReadFile(path)
		return strings.TrimSpace(string(b)), path, err
	}
}

// A token rotated while a job runs: the orchestrator refuses the old one and
// closes the stream; the new token lands in the token file only after the
// worker was refused. The worker waits for it, registers again with it and
// the job, which never stopped, and carries on: no report of the job ends it,
// heartbeats go on with the new token.
func TestTokenRotatedWhileRunning(t *testing.T) {
	t.Parallel()
	var opt Options
	f := newFakeOrch(t)
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte(f.token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r := startWorker(t, f, func(o *Options) {
		o.TokenSource = fileTokenSource(tokenFile)
		o.Timers.TokenPoll = 10 * time.Millisecond
		opt = *o
	})
	f.connected(1)
	f.submit(protocol.JobSubmitEvent{JobID: "j_rotate000001", Config: json.RawMessage(`{"steps":100000,"step_seconds":0.05}`)})
	f.started("j_rotate000001")
	pids := pidsOf(t, filepath.Join(opt.StateDir, "jobs", "j_rotate000001"))

	newToken := "wt_" + strings.Repeat("B", 43) + "abcdef"
	f.mu.Lock()
	regs := len(f.registers)
	f.mu.Unlock()
	f.rotate(newToken)
	f.waitFor("the old token refused", 5*time.Second, func() bool { return f.refusals > 0 })
	if err := os.WriteFile(tokenFile+".tmp", []byte(newToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tokenFile+".tmp", tokenFile); err != nil {
		t.Fatal(err)
	}
	f.waitFor("a registration with the new token and the running job", 10*time.Second, func() bool {
		for _, reg := range f.registers[regs:] {
			if len(reg.Running) == 1 && reg.Running[0].JobID == "j_rotate000001" && reg.Running[0].State == protocol.AttemptRunning {
				return f.streams >= 2
			}
		}
		return false
	})
	f.mu.Lock()
	beats := len(f.heartbeats)
	f.mu.Unlock()
	f.waitFor("heartbeats with the new token", 5*time.Second, func() bool { return len(f.heartbeats) >= beats+3 })
	for _, pid := range pids {
		if !testutil.Running(pid) {
			t.Errorf("the job's process %d died across the rotation", pid)
		}
	}
	f.mu.Lock()
	reports := f.reportsLocked("j_rotate000001")
	f.mu.Unlock()
	for _, rep := range reports {
		if rep.Status != protocol.ReportStarting {
			t.Errorf("the job was reported %s across the rotation", rep.Status)
		}
	}
	select {
	case <-r.done:
		t.Fatalf("the worker stopped: %v", r.err)
	default:
	}
	logs := r.logs.String()
	if !strings.Contains(logs, "using the new worker token") || !strings.Contains(logs, "token="+newToken[:8]) {
		t.Errorf("the new token is not logged by its hint:\n%s", logs)
	}
	if strings.Contains(logs, newToken) {
		t.Error("the new token appears in the log")
	}
}

// A token revoked for good: the worker waits for a new one as long as its
// jobs may run without an acknowledged heartbeat, stops them (self-fenced, the
// outcome kept for after a registration) and ends with ErrAuthRejected.
func TestTokenRevokedNoNewOne(t *testing.T) {
	t.Parallel()
	var opt Options
	f := newFakeOrch(t)
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte(f.token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r := startWorker(t, f, func(o *Options) {
		o.TokenSource = fileTokenSource(tokenFile)
		o.Timers.TokenPoll = 10 * time.Millisecond
		o.SelfFenceAfter = 500 * time.Millisecond
		opt = *o
	})
	f.connected(1)
	f.submit(protocol.JobSubmitEvent{JobID: "j_revoke000001", Config: json.RawMessage(`{"steps":100000,"step_seconds":0.05}`)})
	f.started("j_revoke000001")
	pids := pidsOf(t, filepath.Join(opt.StateDir, "jobs", "j_revoke000001"))
	f.reject.Store(true)
	if err := r.wait(t, 10*time.Second); !errors.Is(err, ErrAuthRejected) {
		t.Fatalf("Serve = %v; want ErrAuthRejected", err)
	}
	waitDead(t, pids, 5*time.Second)
	if rec, ok := spooledReport(t, opt.StateDir, "j_revoke000001-1"); !ok || rec.Status != "cancelled" || !rec.AfterRegister {
		t.Errorf("spooled record %+v (spooled: %v)", rec, ok)
	}
	if !strings.Contains(r.logs.String(), "waiting for a new one") {
		t.Errorf("the wait is not logged:\n%s", r.logs.String())
	}
}
