package keeper

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/artifacts"
	"github.com/simpletuner/simpletuner-orchestration/internal/auth"
	"github.com/simpletuner/simpletuner-orchestration/internal/checkpoint/jobfs"
	"github.com/simpletuner/simpletuner-orchestration/internal/lifecycle"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator/orchtest"
	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
	"github.com/simpletuner/simpletuner-orchestration/internal/store"
	"github.com/simpletuner/simpletuner-orchestration/internal/store/storetest"
	"github.com/simpletuner/simpletuner-orchestration/internal/testutil"
	"github.com/simpletuner/simpletuner-orchestration/internal/worker/orchclient"
)

// orch is a real orchestrator (SQLite, artifacts on the local disk) on a
// loopback server. Attempts are claimed straight in the store, as the
// scheduler would, so that each test holds their upload tokens.
type orch struct {
	t        *testing.T
	st       store.Store
	url      string
	arts     string // the artifacts directory
	workerID string
	logs     *testutil.Buffer
}

func startOrch(t *testing.T, mutate ...func(*orchestrator.Options)) *orch {
	t.Helper()
	st := storetest.Open(t, "sqlite")
	tm := orchtest.Timers
	// Its worker is a bare store row that never heartbeats, and its jobs are
	// dispatched by hand: liveness and the scheduler must leave both alone.
	tm.StartupGrace, tm.HeartbeatTimeout, tm.SchedulerInterval = time.Hour, time.Hour, time.Hour
	opt := orchestrator.OptionsFrom(tm.Config(t))
	for _, m := range mutate {
		m(&opt)
	}
	logs := &testutil.Buffer{}
	srv := orchestrator.New(st, opt, slog.New(slog.NewTextHandler(logs, nil)))
	dir := filepath.Join(t.TempDir(), "artifacts")
	b, err := artifacts.NewLocal(dir)
	if err != nil {
		t.Fatal(err)
	}
	srv.SetArtifacts(artifacts.New(b, artifacts.Limits{}))
	o := orchtest.Serve(t, st, srv, srv.Handler(), "")
	t.Cleanup(func() {
		o.Stop()
		b.Close()
		if t.Failed() {
			t.Logf("orchestrator log:\n%s", logs.String())
		}
	})
	w := store.Worker{ID: protocol.NewWorkerID(), Name: "w", Type: protocol.Persistent, Status: protocol.WorkerIdle,
		GPUInfo: store.ReadGPUInfo(json.RawMessage(`{"count":0}`)), CreatedAt: time.Now()}
	if err := st.CreateWorker(t.Context(), w, "hash-"+w.ID, nil); err != nil {
		t.Fatal(err)
	}
	return &orch{t: t, st: st, url: o.URL, arts: dir, workerID: w.ID, logs: logs}
}

// submit inserts a queued job with a training config.
func (o *orch) submit(cfg string) string {
	o.t.Helper()
	j, err := o.st.InsertJob(o.t.Context(), store.Job{Config: json.RawMessage(cfg), Target: protocol.TargetAuto,
		MaxRetries: 3, Status: protocol.JobQueued}, nil)
	if err != nil {
		o.t.Fatal(err)
	}
	return j.ID
}

// dispatch claims the queued job for the worker, as the scheduler does, and
// returns its job_submit.
func (o *orch) dispatch(jobID string) *protocol.JobSubmitEvent {
	o.t.Helper()
	raw := make([]byte, 32)
	_, _ = rand.Read(raw)
	token := "stu_" + base64.RawURLEncoding.EncodeToString(raw)
	j, a, err := o.st.ClaimJob(o.t.Context(), store.ClaimRequest{WorkerID: o.workerID, JobID: jobID,
		UploadTokenHash: auth.Hash(token), AckDeadline: time.Now().Add(time.Hour), Now: time.Now()})
	if err != nil {
		o.t.Fatal(err)
	}
	return &protocol.JobSubmitEvent{JobID: j.ID, Attempt: a.Number, Config: j.Config, UploadToken: token,
		UploadEndpoint: "/api/cloud/storage", CheckpointsEndpoint: "/api/cloud/checkpoints"}
}

// lose ends the job's current attempt as lost and queues it again.
func (o *orch) lose(jobID string) {
	o.t.Helper()
	j, err := o.st.GetJob(o.t.Context(), jobID)
	if err != nil {
		o.t.Fatal(err)
	}
	_, err = o.st.TransitionJob(o.t.Context(), store.JobTransition{JobID: jobID, ExpectAttempt: j.Attempt, From: j.Status,
		Step: lifecycle.Step{To: protocol.JobQueued, By: lifecycle.Loss, EndAttempt: protocol.OutcomeWithdrawn}, Now: time.Now()})
	if err != nil {
		o.t.Fatal(err)
	}
}

func (o *orch) checkpoints(jobID string) []store.Checkpoint {
	o.t.Helper()
	cs, err := o.st.ListCheckpoints(o.t.Context(), jobID)
	if err != nil {
		o.t.Fatal(err)
	}
	return cs
}

// stored lists the job's objects in the artifacts directory ("attempt/bucket/key").
func (o *orch) stored(jobID string) []string {
	o.t.Helper()
	var out []string
	root := filepath.Join(o.arts, jobID)
	_ = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && !strings.Contains(p, "/.meta/") {
			rel, _ := filepath.Rel(root, p)
			out = append(out, filepath.ToSlash(rel))
		}
		return nil
	})
	return out
}

// keeper returns a Keeper for this orchestrator with fast retries.
func (o *orch) keeper(workDir string) *Keeper {
	api, err := orchclient.New(o.url, "wt_unused", orchclient.TLS{})
	if err != nil {
		o.t.Fatal(err)
	}
	return New(Options{API: api, WorkDir: workDir,
		Log: slog.New(slog.NewTextHandler(&testLog{o.t}, nil)), RetryBase: 10 * time.Millisecond, RequestTimeout: 10 * time.Second})
}

type testLog struct{ t *testing.T }

func (l *testLog) Write(p []byte) (int, error) {
	l.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// jobFor is the keeper's view of ev in a fresh job directory under workDir.
func jobFor(t *testing.T, ev *protocol.JobSubmitEvent, workDir string, notes *testutil.Buffer) Job {
	t.Helper()
	dir := filepath.Join(workDir, ev.JobID)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	j, err := JobFor(ev, dir, 2, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if notes != nil {
		j.Note = func(line string) { _, _ = notes.Write([]byte(line)) }
	}
	return j
}

// writeCheckpoint writes a checkpoint directory as SimpleTuner does: files,
// then the guard last.
func writeCheckpoint(t *testing.T, out string, name string, files map[string]string, guard bool) {
	t.Helper()
	for p, body := range files {
		path := filepath.Join(out, name, p)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if guard {
		if err := os.WriteFile(filepath.Join(out, name, ".guard"), []byte("complete\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

var self = jobfs.Ident{}
