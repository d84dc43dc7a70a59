package storetest

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/audit"
	"github.com/simpletuner/simpletuner-orchestration/internal/lifecycle"
	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
	"github.com/simpletuner/simpletuner-orchestration/internal/store"
)

var dashboardTests = []test{
	{"DashboardSessions", testDashboardSessions},
	{"DashboardSessionsIdle", testDashboardSessionsIdle},
	{"JobsNewestFirst", testJobsNewestFirst},
	{"CountJobsEndedSince", testCountJobsEndedSince},
	{"AuditNewestFiltered", testAuditNewestFiltered},
	{"SummarizeWorkers", testSummarizeWorkers},
	{"CountJobsIn", testCountJobsIn},
}

func testSummarizeWorkers(t *testing.T, s store.Store) {
	a100 := json.RawMessage(`{"count":8,"name":"A100"}`)
	for range 3 {
		newWorker(t, s, func(w *store.Worker) { w.GPUInfo = store.ReadGPUInfo(a100) })
	}
	newWorker(t, s, func(w *store.Worker) { w.GPUInfo = store.ReadGPUInfo(a100); w.Status = protocol.WorkerOffline })
	newWorker(t, s, func(w *store.Worker) { w.GPUInfo = store.ReadGPUInfo(json.RawMessage(`{}`)) })
	busy := newWorker(t, s, func(w *store.Worker) { w.GPUInfo = store.ReadGPUInfo(a100) })
	newJob(t, s)
	claim(t, s, busy.ID)
	groups, err := s.SummarizeWorkers(t.Context())
	noErr(t, err, "SummarizeWorkers")
	got := map[string]int{}
	for _, g := range groups {
		var info map[string]any
		if err := json.Unmarshal(g.GPUInfo.Raw, &info); err != nil {
			t.Fatalf("group GPU info %q: %v", g.GPUInfo.Raw, err)
		}
		got[fmt.Sprintf("%s/%v/%v", g.Status, info["name"], g.HasJob)] += g.Count
	}
	equal(t, got, map[string]int{"idle/A100/false": 3, "offline/A100/false": 1, "idle/<nil>/false": 1, "busy/A100/true": 1}, "worker groups")
}

func testCountJobsIn(t *testing.T, s store.Store) {
	w := newWorker(t, s)
	newJob(t, s)
	newJob(t, s)
	j, _ := claim(t, s, w.ID)
	transition(t, s, j, store.JobTransition{Step: lifecycle.Step{To: protocol.JobCompleted, By: lifecycle.Report, EndAttempt: protocol.OutcomeCompleted, Ack: true}})
	got, err := s.CountJobsIn(t.Context(), []protocol.JobStatus{protocol.JobQueued, protocol.JobRunning})
	noErr(t, err, "CountJobsIn")
	equal(t, got, map[protocol.JobStatus]int{protocol.JobQueued: 1}, "queued and running")
	got, err = s.CountJobsIn(t.Context(), nil)
	noErr(t, err, "CountJobsIn()")
	equal(t, got, map[protocol.JobStatus]int{}, "no statuses")
}

func testDashboardSessions(t *testing.T, s store.Store) {
	ctx := t.Context()
	maxPriority := 20
	tok := store.AdminToken{ID: "tok_a", Name: "ops", Scopes: []string{"queue.view"}, Hash: "ha", CreatedAt: t0, MaxPriority: &maxPriority}
	noErr(t, s.CreateAdminToken(ctx, tok, nil), "CreateAdminToken")

	sess := store.DashboardSession{IDHash: "s1", TokenID: "tok_a", CreatedAt: at(time.Second), PeerIP: "10.0.0.9", UserAgent: "test"}
	wantErr(t, s.CreateDashboardSession(ctx, store.DashboardSession{IDHash: "s0", TokenID: "tok_missing"}, rec("x")),
		store.ErrNotFound, "session for an unknown token")
	noErr(t, s.CreateDashboardSession(ctx, sess, rec("dashboard.signin")), "CreateDashboardSession")
	wantErr(t, s.CreateDashboardSession(ctx, sess, nil), store.ErrDuplicate, "same id hash")

	got, err := s.GetDashboardSession(ctx, "s1")
	noErr(t, err, "GetDashboardSession")
	sess.LastSeen = sess.CreatedAt
	sess.Token = tok
	equal(t, got, sess, "session with its token")
	_, err = s.GetDashboardSession(ctx, "nope")
	wantErr(t, err, store.ErrNotFound, "unknown session")

	noErr(t, s.TouchDashboardSession(ctx, "s1", at(time.Minute)), "Touch")
	noErr(t, s.TouchDashboardSession(ctx, "s1", at(30*time.Second)), "Touch back in time")
	got, _ = s.GetDashboardSession(ctx, "s1")
	equal(t, got.LastSeen, at(time.Minute), "LastSeen only moves forward")
	wantErr(t, s.TouchDashboardSession(ctx, "nope", at(time.Minute)), store.ErrNotFound, "touch unknown")

	// Revoking the token shows on the session's next read; no new session opens.
	noErr(t, s.RevokeAdminToken(ctx, "tok_a", nil), "RevokeAdminToken")
	got, err = s.GetDashboardSession(ctx, "s1")
	noErr(t, err, "session of a revoked token is still readable")
	if got.Token.RevokedAt == nil {
		t.Fatal("session's token shows no revocation")
	}
	wantErr(t, s.CreateDashboardSession(ctx, store.DashboardSession{IDHash: "s2", TokenID: "tok_a"}, nil),
		store.ErrNotFound, "session for a revoked token")

	noErr(t, s.DeleteDashboardSession(ctx, "s1", rec("dashboard.signout")), "DeleteDashboardSession")
	_, err = s.GetDashboardSession(ctx, "s1")
	wantErr(t, err, store.ErrNotFound, "deleted session")
	wantErr(t, s.DeleteDashboardSession(ctx, "s1", rec("dashboard.signout")), store.ErrNotFound, "delete twice")
	recs := chain(t, s)
	if len(recs) != 2 || recs[0].Action != "dashboard.signin" || recs[1].Action != "dashboard.signout" {
		t.Fatalf("audit: %+v (a refused create or delete must append nothing)", recs)
	}
}

func testDashboardSessionsIdle(t *testing.T, s store.Store) {
	ctx := t.Context()
	noErr(t, s.CreateAdminToken(ctx, store.AdminToken{ID: "tok_a", Hash: "ha", CreatedAt: t0}, nil), "CreateAdminToken")
	for i, id := range []string{"old", "mid", "new"} {
		noErr(t, s.CreateDashboardSession(ctx, store.DashboardSession{IDHash: id, TokenID: "tok_a",
			CreatedAt: at(time.Duration(i) * time.Hour)}, nil), "create "+id)
	}
	n, err := s.DeleteIdleDashboardSessions(ctx, at(90*time.Minute))
	noErr(t, err, "DeleteIdleDashboardSessions")
	if n != 2 {
		t.Fatalf("deleted %d idle sessions, want 2", n)
	}
	if _, err := s.GetDashboardSession(ctx, "new"); err != nil {
		t.Fatalf("a recent session was deleted: %v", err)
	}
	for _, id := range []string{"old", "mid"} {
		_, err := s.GetDashboardSession(ctx, id)
		wantErr(t, err, store.ErrNotFound, "idle session "+id)
	}
}

func testJobsNewestFirst(t *testing.T, s store.Store) {
	var ids []string
	for i := 0; i < 5; i++ {
		ids = append(ids, newJob(t, s).ID)
	}
	jobs, total, err := s.ListJobs(t.Context(), store.JobFilter{Newest: true, Limit: 2, Offset: 1})
	noErr(t, err, "ListJobs newest")
	if total != 5 || len(jobs) != 2 || jobs[0].ID != ids[3] || jobs[1].ID != ids[2] {
		t.Fatalf("newest first, page 2 of 2: total %d, %v", total, jobs)
	}
}

func testCountJobsEndedSince(t *testing.T, s store.Store) {
	w := newWorker(t, s)
	finish := func(to protocol.JobStatus, outcome protocol.AttemptOutcome, when time.Time) {
		newJob(t, s)
		j, _ := claim(t, s, w.ID)
		transition(t, s, j, store.JobTransition{Step: lifecycle.Step{To: to, By: lifecycle.Report, EndAttempt: outcome, Ack: to == protocol.JobCompleted}, Now: when})
	}
	finish(protocol.JobCompleted, protocol.OutcomeCompleted, at(time.Hour))
	finish(protocol.JobCompleted, protocol.OutcomeCompleted, at(48*time.Hour))
	finish(protocol.JobFailed, protocol.OutcomeFailed, at(49*time.Hour))
	newJob(t, s) // still queued
	got, err := s.CountJobsEndedSince(t.Context(), at(24*time.Hour))
	noErr(t, err, "CountJobsEndedSince")
	equal(t, got, map[protocol.JobStatus]int{protocol.JobCompleted: 1, protocol.JobFailed: 1}, "ended in the window")
	// [from, to): the lower bound is in, the upper one out.
	got, err = s.CountJobsEndedBetween(t.Context(), at(time.Hour), at(49*time.Hour))
	noErr(t, err, "CountJobsEndedBetween")
	equal(t, got, map[protocol.JobStatus]int{protocol.JobCompleted: 2}, "ended in [1h, 49h)")
	got, err = s.CountJobsEndedBetween(t.Context(), at(48*time.Hour), time.Time{})
	noErr(t, err, "CountJobsEndedBetween, open")
	equal(t, got, map[protocol.JobStatus]int{protocol.JobCompleted: 1, protocol.JobFailed: 1}, "ended from 48h on")
}

func testAuditNewestFiltered(t *testing.T, s store.Store) {
	add := func(actor, action, target string) {
		r := audit.New(actor, "", action, "worker", target, audit.Success, nil)
		noErr(t, s.AppendAudit(t.Context(), r), "AppendAudit")
	}
	add("admin:a", "worker.create", "w_1")       // 1
	add("admin:b", "worker.token_rotate", "w_1") // 2
	add("admin:a", "job.submit", "j_1")          // 3
	add("admin:a", "worker.drain", "w_2")        // 4
	add("system", "worker_x.odd", "w_3")         // 5: "worker_" must not match the prefix "worker."
	seqs := func(f store.AuditFilter) []int64 {
		t.Helper()
		recs, err := s.ListAuditNewest(t.Context(), f)
		noErr(t, err, "ListAuditNewest")
		out := []int64{}
		for _, r := range recs {
			out = append(out, r.Seq)
		}
		return out
	}
	equal(t, seqs(store.AuditFilter{}), []int64{5, 4, 3, 2, 1}, "all, newest first")
	equal(t, seqs(store.AuditFilter{Limit: 2, BeforeSeq: 4}), []int64{3, 2}, "page before 4")
	equal(t, seqs(store.AuditFilter{Actor: "admin:a"}), []int64{4, 3, 1}, "by actor")
	equal(t, seqs(store.AuditFilter{Action: "worker."}), []int64{4, 2, 1}, "by action prefix")
	equal(t, seqs(store.AuditFilter{Action: "worker.drain"}), []int64{4}, "by exact action")
	equal(t, seqs(store.AuditFilter{TargetID: "w_1", Actor: "admin:a"}), []int64{1}, "by target and actor")
	equal(t, seqs(store.AuditFilter{Action: "nothing"}), []int64{}, "no match")
}
