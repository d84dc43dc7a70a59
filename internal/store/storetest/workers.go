package storetest

import (
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/audit"
	"github.com/simpletuner/simpletuner-orchestration/internal/lifecycle"
	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
	"github.com/simpletuner/simpletuner-orchestration/internal/store"
)

var workerTests = []test{
	{"Ping", func(t *testing.T, s store.Store) { noErr(t, s.Ping(t.Context()), "Ping") }},
	{"WorkerRoundTrip", testWorkerRoundTrip},
	{"WorkerTokenHashLookup", testWorkerTokenHashLookup},
	{"ReportingWorkerLookup", testReportingWorkerLookup},
	{"WorkerDuplicate", testWorkerDuplicate},
	{"WorkerNotFound", testWorkerNotFound},
	{"ListWorkersPaging", testListWorkersPaging},
	{"UpdateWorker", testUpdateWorker},
	{"UpdateWorkerAborts", testUpdateWorkerAborts},
	{"SetWorkerTokenHash", testSetWorkerTokenHash},
	{"DeleteWorkerKeepsHistory", testDeleteWorkerKeepsHistory},
}

func fullWorker() store.Worker {
	return store.Worker{
		ID: protocol.NewWorkerID(), Name: "box-1", Type: protocol.Ephemeral, Status: protocol.WorkerDraining,
		GPUInfo:  store.ReadGPUInfo(json.RawMessage(`{"name":"A100","vram_gb":80,"count":8}`)),
		Provider: "runpod", Labels: map[string]string{"zone": "eu", "tier": "gold"},
		AdminLabels: map[string]string{"tier": "gold"}, LabelsLocked: true, Persistent: true, Local: true,
		CurrentJobID: "j_x", Protocol: 2, AgentVersion: "1.2.3",
		LastHeartbeat: ptr(at(time.Minute)), ConnectedAt: ptr(at(2 * time.Minute)),
		StreamInstance: "inst-a", CreatedAt: t0, CreatedBy: "admin:root",
		Capabilities: protocol.Capabilities{CancelGraceSeconds: 5},
		GPUConditions: []protocol.GPUCondition{
			{Index: 1, UUID: "GPU-b", State: protocol.GPUHeld, Reason: "pid 4411 uid 1879 (python3): 1,002 MiB", Since: "2030-01-02T03:04:05Z"},
			{Index: 3, UUID: "GPU-d", State: protocol.GPUUnhealthy, Reason: "XID 79 (fell off the bus)", Since: "2030-01-02T03:04:06Z"},
		},
		GPUClears: []int{3},
	}
}

func testWorkerRoundTrip(t *testing.T, s store.Store) {
	w := fullWorker()
	noErr(t, s.CreateWorker(t.Context(), w, "hash-1", rec("worker.create")), "CreateWorker")
	w.TokenHash = "hash-1"
	equal(t, getWorker(t, s, w.ID), w, "GetWorker")
	got, err := s.GetWorkerByTokenHash(t.Context(), "hash-1")
	noErr(t, err, "GetWorkerByTokenHash")
	equal(t, got, w, "GetWorkerByTokenHash")
	state, err := s.GetWorkerState(t.Context(), w.ID)
	noErr(t, err, "GetWorkerState")
	equal(t, state, store.WorkerState{Type: w.Type, Status: w.Status, CurrentJobID: w.CurrentJobID, TokenHash: "hash-1"}, "GetWorkerState")

	// Zero values come back as zero values (maps empty, GPU info {}).
	minimal := store.Worker{ID: protocol.NewWorkerID(), CreatedAt: t0}
	noErr(t, s.CreateWorker(t.Context(), minimal, "hash-2", nil), "CreateWorker minimal")
	g := getWorker(t, s, minimal.ID)
	if len(g.Labels) != 0 || len(g.AdminLabels) != 0 || string(g.GPUInfo.Raw) != "{}" ||
		g.LastHeartbeat != nil || g.ConnectedAt != nil || g.CurrentJobID != "" || g.Persistent || g.LabelsLocked ||
		g.GPUConditions != nil || g.GPUClears != nil || g.WholeWorkerHeld {
		t.Fatalf("minimal worker came back as %+v", g)
	}
	if g.Labels == nil || g.AdminLabels == nil {
		t.Fatal("label maps must be non-nil so callers can write to them")
	}
	if len(chain(t, s)) != 1 {
		t.Fatal("CreateWorker with a record must append it")
	}
}

func testWorkerTokenHashLookup(t *testing.T, s store.Store) {
	newWorker(t, s)
	_, err := s.GetWorkerByTokenHash(t.Context(), "nope")
	wantErr(t, err, store.ErrNotFound, "unknown hash")
	_, err = s.GetWorkerByTokenHash(t.Context(), "")
	wantErr(t, err, store.ErrNotFound, "empty hash")
}

// The reports' lookup gives the same worker as the full one in the fields
// it reads, and zero in the others.
func testReportingWorkerLookup(t *testing.T, s store.Store) {
	w := fullWorker()
	noErr(t, s.CreateWorker(t.Context(), w, "hash-r", rec("worker.create")), "CreateWorker")
	full, err := s.GetWorkerByTokenHash(t.Context(), "hash-r")
	noErr(t, err, "GetWorkerByTokenHash")
	got, err := s.GetReportingWorkerByTokenHash(t.Context(), "hash-r")
	noErr(t, err, "GetReportingWorkerByTokenHash")
	want := store.Worker{ID: full.ID, Name: full.Name, Type: full.Type, Status: full.Status, Session: full.Session,
		TokenHash: full.TokenHash, LastHeartbeat: full.LastHeartbeat, GPUInfo: full.GPUInfo,
		GPUConditions: full.GPUConditions, GPUClears: full.GPUClears}
	equal(t, got, want, "GetReportingWorkerByTokenHash")
	if got.GPUInfo.Count != 8 || len(got.GPUConditions) != 2 || len(got.GPUClears) != 1 || got.LastHeartbeat == nil {
		t.Fatalf("the reports' lookup lost a field it reads: %+v", got)
	}

	minimal := store.Worker{ID: protocol.NewWorkerID(), CreatedAt: t0}
	noErr(t, s.CreateWorker(t.Context(), minimal, "hash-m", nil), "CreateWorker minimal")
	g, err := s.GetReportingWorkerByTokenHash(t.Context(), "hash-m")
	noErr(t, err, "GetReportingWorkerByTokenHash minimal")
	if g.ID != minimal.ID || g.GPUConditions != nil || g.GPUClears != nil || g.LastHeartbeat != nil || string(g.GPUInfo.Raw) != "{}" {
		t.Fatalf("minimal worker came back as %+v", g)
	}
	_, err = s.GetReportingWorkerByTokenHash(t.Context(), "nope")
	wantErr(t, err, store.ErrNotFound, "unknown hash")
	_, err = s.GetReportingWorkerByTokenHash(t.Context(), "")
	wantErr(t, err, store.ErrNotFound, "empty hash")
}

func testWorkerDuplicate(t *testing.T, s store.Store) {
	w := store.Worker{ID: "w_dup", CreatedAt: t0, Status: protocol.WorkerIdle}
	noErr(t, s.CreateWorker(t.Context(), w, "h1", nil), "CreateWorker")
	wantErr(t, s.CreateWorker(t.Context(), w, "h2", rec("worker.create")), store.ErrDuplicate, "same id")
	w.ID = "w_other"
	wantErr(t, s.CreateWorker(t.Context(), w, "h1", rec("worker.create")), store.ErrDuplicate, "same token hash")
	if n := len(chain(t, s)); n != 0 {
		t.Fatalf("failed inserts appended %d audit records", n)
	}
}

func testWorkerNotFound(t *testing.T, s store.Store) {
	ctx := t.Context()
	_, err := s.GetWorker(ctx, "w_missing")
	wantErr(t, err, store.ErrNotFound, "GetWorker")
	_, err = s.GetWorkerState(ctx, "w_missing")
	wantErr(t, err, store.ErrNotFound, "GetWorkerState")
	_, err = s.UpdateWorker(ctx, "w_missing", func(*store.Worker) (*audit.Record, error) { return nil, nil })
	wantErr(t, err, store.ErrNotFound, "UpdateWorker")
	wantErr(t, s.SetWorkerTokenHash(ctx, "w_missing", "h", nil), store.ErrNotFound, "SetWorkerTokenHash")
	wantErr(t, s.DeleteWorker(ctx, "w_missing", rec("worker.delete")), store.ErrNotFound, "DeleteWorker")
	if n := len(chain(t, s)); n != 0 {
		t.Fatalf("failed calls appended %d audit records", n)
	}
}

func testListWorkersPaging(t *testing.T, s store.Store) {
	// Created out of order; equal created_at is broken by id.
	specs := []struct {
		id     string
		at     time.Duration
		status protocol.WorkerStatus
	}{
		{"w_c", 2, protocol.WorkerIdle}, {"w_a", 1, protocol.WorkerBusy}, {"w_e", 3, protocol.WorkerIdle},
		{"w_b", 2, protocol.WorkerOffline}, {"w_d", 0, protocol.WorkerIdle},
	}
	for _, sp := range specs {
		newWorker(t, s, func(w *store.Worker) {
			w.ID, w.CreatedAt, w.Status, w.Name = sp.id, at(sp.at*time.Second), sp.status, "box-"+sp.id[2:]
		})
	}
	ids := func(ws []store.Worker) []string {
		var out []string
		for _, w := range ws {
			out = append(out, w.ID)
		}
		return out
	}
	cases := []struct {
		f     store.WorkerFilter
		want  []string
		total int
	}{
		{store.WorkerFilter{}, []string{"w_d", "w_a", "w_b", "w_c", "w_e"}, 5},
		{store.WorkerFilter{Limit: 2}, []string{"w_d", "w_a"}, 5},
		{store.WorkerFilter{Limit: 2, Offset: 2}, []string{"w_b", "w_c"}, 5},
		{store.WorkerFilter{Offset: 4}, []string{"w_e"}, 5},
		{store.WorkerFilter{Limit: 3, Offset: 10}, nil, 5},
		{store.WorkerFilter{Status: protocol.WorkerIdle}, []string{"w_d", "w_c", "w_e"}, 3},
		{store.WorkerFilter{Status: protocol.WorkerIdle, Limit: 1, Offset: 1}, []string{"w_c"}, 3},
		{store.WorkerFilter{Status: protocol.WorkerDraining}, nil, 0},
		{store.WorkerFilter{Name: "box-c"}, []string{"w_c"}, 1},
		{store.WorkerFilter{Name: "box-c", Status: protocol.WorkerBusy}, nil, 0},
		{store.WorkerFilter{Name: "box"}, nil, 0},
	}
	for _, c := range cases {
		ws, total, err := s.ListWorkers(t.Context(), c.f)
		noErr(t, err, "ListWorkers")
		equal(t, ids(ws), c.want, fmt.Sprintf("ListWorkers(%+v) ids", c.f))
		equal(t, total, c.total, fmt.Sprintf("ListWorkers(%+v) total", c.f))
	}
}

func testUpdateWorker(t *testing.T, s store.Store) {
	w := newWorker(t, s)
	got, err := s.UpdateWorker(t.Context(), w.ID, func(cur *store.Worker) (*audit.Record, error) {
		if cur.ID != w.ID || cur.TokenHash != w.TokenHash {
			return nil, fmt.Errorf("fn saw %+v", cur)
		}
		cur.ID, cur.TokenHash = "w_changed", "changed" // both ignored
		cur.Status = protocol.WorkerBusy
		cur.Labels["gpu"] = "a100"
		cur.GPUInfo = store.ReadGPUInfo(json.RawMessage(`{"count":4}`))
		cur.LastHeartbeat = ptr(at(time.Hour))
		cur.StreamInstance = "inst-b"
		return rec("worker.update"), nil
	})
	noErr(t, err, "UpdateWorker")
	want := w
	want.Status, want.Labels = protocol.WorkerBusy, map[string]string{"gpu": "a100"}
	want.GPUInfo, want.LastHeartbeat, want.StreamInstance = store.ReadGPUInfo(json.RawMessage(`{"count":4}`)), ptr(at(time.Hour)), "inst-b"
	equal(t, got, want, "UpdateWorker result")
	equal(t, getWorker(t, s, w.ID), want, "stored worker")
	_, err = s.GetWorker(t.Context(), "w_changed")
	wantErr(t, err, store.ErrNotFound, "the ID must not change")
	if _, err := s.GetWorkerByTokenHash(t.Context(), w.TokenHash); err != nil {
		t.Fatalf("the token hash must not change: %v", err)
	}
	if recs := chain(t, s); len(recs) != 1 || recs[0].Action != "worker.update" {
		t.Fatalf("audit after UpdateWorker: %+v", recs)
	}
}

func testUpdateWorkerAborts(t *testing.T, s store.Store) {
	w := newWorker(t, s)
	boom := errors.New("boom")
	_, err := s.UpdateWorker(t.Context(), w.ID, func(cur *store.Worker) (*audit.Record, error) {
		cur.Status = protocol.WorkerOffline
		return rec("worker.update"), boom
	})
	wantErr(t, err, boom, "fn error")
	equal(t, getWorker(t, s, w.ID), w, "worker after aborted update")
	// A record the store cannot append (no action) aborts the change too.
	_, err = s.UpdateWorker(t.Context(), w.ID, func(cur *store.Worker) (*audit.Record, error) {
		cur.Status = protocol.WorkerOffline
		r := audit.New("system", "", "", "worker", w.ID, audit.Success, nil)
		return &r, nil
	})
	if err == nil {
		t.Fatal("an audit record without an action must fail")
	}
	equal(t, getWorker(t, s, w.ID), w, "worker after failed audit")
	if n := len(chain(t, s)); n != 0 {
		t.Fatalf("aborted updates appended %d audit records", n)
	}
}

func testSetWorkerTokenHash(t *testing.T, s store.Store) {
	a, b := newWorker(t, s), newWorker(t, s)
	noErr(t, s.SetWorkerTokenHash(t.Context(), a.ID, "rotated", rec("worker.token")), "SetWorkerTokenHash")
	_, err := s.GetWorkerByTokenHash(t.Context(), a.TokenHash)
	wantErr(t, err, store.ErrNotFound, "old hash")
	got, err := s.GetWorkerByTokenHash(t.Context(), "rotated")
	noErr(t, err, "new hash")
	equal(t, got.ID, a.ID, "worker by new hash")
	wantErr(t, s.SetWorkerTokenHash(t.Context(), b.ID, "rotated", nil), store.ErrDuplicate, "hash of another worker")
	if len(chain(t, s)) != 1 {
		t.Fatal("SetWorkerTokenHash must append its record")
	}
}

func testDeleteWorkerKeepsHistory(t *testing.T, s store.Store) {
	w := newWorker(t, s)
	queued := newJob(t, s)
	j, _ := claim(t, s, w.ID)
	equal(t, j.ID, queued.ID, "the claimed job")
	j = transition(t, s, j, store.JobTransition{Step: lifecycle.Step{To: protocol.JobCompleted, By: lifecycle.Report, EndAttempt: protocol.OutcomeCompleted}})
	noErr(t, s.DeleteWorker(t.Context(), w.ID, rec("worker.delete")), "DeleteWorker")
	_, err := s.GetWorker(t.Context(), w.ID)
	wantErr(t, err, store.ErrNotFound, "deleted worker")
	equal(t, getJob(t, s, j.ID), j, "job after its worker was deleted")
	as := attempts(t, s, j.ID)
	if len(as) != 1 || as[0].WorkerID != w.ID {
		t.Fatalf("attempts after delete: %+v", as)
	}
	if len(chain(t, s)) != 1 {
		t.Fatal("DeleteWorker must append its record")
	}
}
