package webhook

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/audit"
	"github.com/simpletuner/simpletuner-orchestration/internal/lifecycle"
	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
	"github.com/simpletuner/simpletuner-orchestration/internal/store"
	"github.com/simpletuner/simpletuner-orchestration/internal/webhook/spec"
)

var t0 = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

func types(es []store.OutboxEvent) []string {
	out := []string{}
	for _, e := range es {
		out = append(out, e.Type)
	}
	return out
}

func payloadOf(t *testing.T, e store.OutboxEvent) Payload {
	t.Helper()
	var p Payload
	if err := json.Unmarshal(e.Payload, &p); err != nil {
		t.Fatal(err)
	}
	if p.ID != e.ID || p.Type != e.Type || !strings.HasPrefix(p.ID, "evt_") {
		t.Fatalf("payload %+v of event %+v", p, e)
	}
	return p
}

func TestJobEvents(t *testing.T) {
	t.Parallel()
	e := NewEmitter(nil)
	e.SetBaseURL("https://orch.example")
	started := t0.Add(time.Minute)
	ended := t0.Add(time.Hour)
	job := store.Job{ID: "j_1", ConfigName: "flux-lora", SubmittedBy: "admin:tok_a", Status: protocol.JobDispatched,
		Attempt: 1, WorkerID: "w_1", MaxRetries: 3, CreatedAt: t0, UpdatedAt: t0}
	at := func(j store.Job, st protocol.JobStatus, mod func(*store.Job)) store.Job {
		j.Status, j.UpdatedAt = st, ended
		if mod != nil {
			mod(&j)
		}
		return j
	}
	for _, tc := range []struct {
		name        string
		before      store.Job
		after       store.Job
		step        lifecycle.Step
		want        []string
		check       func(t *testing.T, ps []Payload)
		skipPayload bool
	}{
		{name: "claimed", before: at(job, protocol.JobQueued, nil), after: job,
			step: lifecycle.Step{To: protocol.JobDispatched, By: lifecycle.Claim}, want: []string{}},
		{name: "acknowledged", before: job, after: at(job, protocol.JobRunning, func(j *store.Job) { j.StartedAt = &started }),
			step: lifecycle.Step{To: protocol.JobRunning, By: lifecycle.Report, Ack: true}, want: []string{spec.JobStarted}},
		{name: "progress", before: at(job, protocol.JobRunning, nil), after: at(job, protocol.JobRunning, nil),
			step: lifecycle.Step{To: protocol.JobRunning, By: lifecycle.Report}, want: []string{}},
		{name: "completed", before: at(job, protocol.JobRunning, nil),
			after: at(job, protocol.JobCompleted, func(j *store.Job) { j.StartedAt, j.EndedAt = &started, &ended }),
			step:  lifecycle.Step{To: protocol.JobCompleted, By: lifecycle.Report, EndAttempt: protocol.OutcomeCompleted},
			want:  []string{spec.JobCompleted}, check: func(t *testing.T, ps []Payload) {
				j := ps[0].Job
				if j.Outcome != "completed" || j.EndedAt != stamp(ended) || j.StartedAt != stamp(started) || j.Team != spec.DefaultTeam ||
					j.Links.Artifacts != "https://orch.example/api/queue/j_1/artifacts" || j.Links.Dashboard != "https://orch.example/ui/jobs/j_1" ||
					j.ConfigName != "flux-lora" || j.SubmittedBy != "admin:tok_a" || j.WorkerID != "w_1" || ps[0].Time != stamp(ended) {
					t.Fatalf("job %+v", j)
				}
			}},
		{name: "finished before its start was reported", before: job,
			after: at(job, protocol.JobCompleted, func(j *store.Job) { j.StartedAt, j.EndedAt = &ended, &ended }),
			step:  lifecycle.Step{To: protocol.JobCompleted, By: lifecycle.Report, EndAttempt: protocol.OutcomeCompleted, Ack: true},
			want:  []string{spec.JobStarted, spec.JobCompleted}, check: func(t *testing.T, ps []Payload) {
				if ps[0].Job.Status != "running" || ps[0].Job.EndedAt != "" || ps[1].Job.Status != "completed" {
					t.Fatalf("started %+v, completed %+v", ps[0].Job, ps[1].Job)
				}
			}},
		{name: "failed", before: at(job, protocol.JobRunning, nil),
			after: at(job, protocol.JobFailed, func(j *store.Job) { j.Error = "CUDA out of memory" }),
			step:  lifecycle.Step{To: protocol.JobFailed, By: lifecycle.Report, EndAttempt: protocol.OutcomeFailed},
			want:  []string{spec.JobFailed}, check: func(t *testing.T, ps []Payload) {
				if ps[0].Job.Error != "CUDA out of memory" || ps[0].Job.Outcome != "failed" {
					t.Fatalf("%+v", ps[0].Job)
				}
			}},
		{name: "cancelling", before: at(job, protocol.JobRunning, nil), after: at(job, protocol.JobCanceling, nil),
			step: lifecycle.Step{To: protocol.JobCanceling, By: lifecycle.Cancel}, want: []string{}},
		{name: "cancelled", before: at(job, protocol.JobCanceling, nil), after: at(job, protocol.JobCancelled, nil),
			step: lifecycle.Step{To: protocol.JobCancelled, By: lifecycle.Report, EndAttempt: protocol.OutcomeCancelled},
			want: []string{spec.JobCancelled}},
		{name: "requeued", before: at(job, protocol.JobRunning, nil),
			after: at(job, protocol.JobQueued, func(j *store.Job) {
				j.WorkerID, j.Error = "", "attempt 1 lost: heartbeat timeout; requeued (retry 1 of 3)"
			}),
			step: lifecycle.Step{To: protocol.JobQueued, By: lifecycle.Loss, EndAttempt: protocol.OutcomeWorkerLost, SpendRetry: true},
			want: []string{spec.JobRequeued}, check: func(t *testing.T, ps []Payload) {
				j := ps[0].Job
				if j.Reason != "attempt 1 lost: heartbeat timeout; requeued (retry 1 of 3)" || j.Error != "" || j.Outcome != "worker_lost" ||
					j.WorkerID != "w_1" || j.Status != "queued" {
					t.Fatalf("%+v", j)
				}
			}},
		{name: "released", before: at(job, protocol.JobWaiting, func(j *store.Job) { j.Attempt, j.WorkerID = 0, "" }),
			after: at(job, protocol.JobQueued, func(j *store.Job) { j.Attempt, j.WorkerID = 0, "" }),
			step:  lifecycle.Step{To: protocol.JobQueued, By: lifecycle.DependsOn},
			want:  []string{spec.JobReleased}},
		{name: "dependency unmet", before: at(job, protocol.JobWaiting, func(j *store.Job) { j.Attempt, j.WorkerID = 0, "" }),
			after: at(job, protocol.JobCancelled, func(j *store.Job) {
				j.Attempt, j.WorkerID, j.Error = 0, "", "dependency j_0 ended failed; this job needed it to complete"
			}),
			step: lifecycle.Step{To: protocol.JobCancelled, By: lifecycle.DependsOn},
			want: []string{spec.JobCancelled}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			es := e.JobMoved(tc.before, tc.after, &store.JobTransition{Step: tc.step})
			if got := types(es); !slices.Equal(got, tc.want) {
				t.Fatalf("events %v, want %v", got, tc.want)
			}
			var ps []Payload
			for _, ev := range es {
				if ev.Key != "job:j_1" || ev.Team != spec.DefaultTeam || !ev.Time.Equal(ended) {
					t.Fatalf("event %+v", ev)
				}
				ps = append(ps, payloadOf(t, ev))
			}
			if tc.check != nil {
				tc.check(t, ps)
			}
		})
	}
	q := e.JobInserted(at(job, protocol.JobQueued, func(j *store.Job) { j.Attempt, j.WorkerID = 0, "" }))
	if got := types(q); !slices.Equal(got, []string{spec.JobQueued}) || !q[0].Time.Equal(t0) {
		t.Fatalf("insert: %v at %v", got, q[0].Time)
	}
}

// A kept checkpoint is announced with its job, where it is stored and how
// big it is.
// A preempted attempt's requeue is job.preempted, for the job's team.
func TestPreemptedEvent(t *testing.T) {
	t.Parallel()
	e := NewEmitter(nil)
	before := store.Job{ID: "j_1", Team: "nlp", Status: protocol.JobCanceling, Attempt: 1, WorkerID: "w_1",
		PreemptedBy: "j_2 (team vision under its share)", CreatedAt: t0, UpdatedAt: t0}
	after := before
	after.Status, after.WorkerID, after.PreemptedBy = protocol.JobQueued, "", ""
	after.Error = "attempt 1 preempted by j_2 (team vision under its share); stopped by its worker; requeued without spending a retry"
	es := e.JobMoved(before, after, &store.JobTransition{Step: lifecycle.Step{To: protocol.JobQueued, By: lifecycle.Report,
		EndAttempt: protocol.OutcomePreempted}})
	if got := types(es); !slices.Equal(got, []string{spec.JobPreempted}) || es[0].Team != "nlp" {
		t.Fatalf("events %v (team %q)", got, es[0].Team)
	}
	if j := payloadOf(t, es[0]).Job; j.Outcome != "preempted" || j.Reason != after.Error || j.Team != "nlp" || j.WorkerID != "w_1" {
		t.Fatalf("%+v", j)
	}
}

func TestCheckpointEvent(t *testing.T) {
	t.Parallel()
	e := NewEmitter(nil)
	e.SetBaseURL("https://orch.example")
	job := store.Job{ID: "j_1", ConfigName: "flux-lora", Status: protocol.JobRunning, Attempt: 2, WorkerID: "w_1", CreatedAt: t0}
	es := e.CheckpointKept(job, store.Checkpoint{JobID: "j_1", Attempt: 2, Name: "checkpoint-500", Step: 500, Bytes: 3 << 30, CreatedAt: t0})
	if got := types(es); !slices.Equal(got, []string{spec.CheckpointSaved}) || es[0].Key != "job:j_1" || !es[0].Time.Equal(t0) {
		t.Fatalf("checkpoint: %v %+v", got, es)
	}
	p := payloadOf(t, es[0])
	if p.Job == nil || p.Job.ID != "j_1" || p.Checkpoint == nil || p.Checkpoint.Path != "checkpoints/checkpoint-500" ||
		p.Checkpoint.Attempt != 2 || p.Checkpoint.Bytes != 3<<30 || p.Checkpoint.Link != "https://orch.example/api/queue/j_1/artifacts?attempt=2" {
		t.Fatalf("checkpoint payload %+v %+v", p.Job, p.Checkpoint)
	}
}

func TestWorkerEvents(t *testing.T) {
	t.Parallel()
	e := NewEmitter(nil)
	w := store.Worker{ID: "w_1", Name: "gpu-1", Status: protocol.WorkerIdle}
	off := w
	off.Status = protocol.WorkerOffline
	rec := audit.New("system", "", "worker.offline", "worker", "w_1", audit.Success, map[string]string{"reason": "no heartbeat for 2m0s"})

	es := e.WorkerChanged(w, off, &rec)
	if got := types(es); !slices.Equal(got, []string{spec.WorkerOffline}) || es[0].Key != "worker:w_1" || es[0].Team != "" {
		t.Fatalf("offline: %v %+v", got, es)
	}
	if p := payloadOf(t, es[0]); p.Worker.Reason != "no heartbeat for 2m0s" || p.Worker.Name != "gpu-1" {
		t.Fatalf("offline payload %+v", p.Worker)
	}
	if got := types(e.WorkerChanged(off, w, nil)); !slices.Equal(got, []string{spec.WorkerOnline}) {
		t.Fatalf("back: %v", got)
	}
	if got := types(e.WorkerChanged(w, w, nil)); len(got) != 0 {
		t.Fatalf("no change: %v", got)
	}

	held := protocol.GPUCondition{Index: 0, State: protocol.GPUHeld, Reason: "pid 4411"}
	bad := protocol.GPUCondition{Index: 3, UUID: "GPU-3", State: protocol.GPUUnhealthy, Reason: "XID 79 (fell off the bus)"}
	fenced := w
	fenced.GPUConditions = []protocol.GPUCondition{held, bad}
	es = e.WorkerChanged(w, fenced, nil)
	if got := types(es); !slices.Equal(got, []string{spec.GPUUnhealthy}) {
		t.Fatalf("fenced: %v", got)
	}
	if p := payloadOf(t, es[0]); p.GPU == nil || p.GPU.Index != 3 || p.GPU.UUID != "GPU-3" || p.GPU.Reason != bad.Reason || p.Worker.ID != "w_1" {
		t.Fatalf("gpu payload %+v", p)
	}
	if got := types(e.WorkerChanged(fenced, fenced, nil)); len(got) != 0 {
		t.Fatalf("a fence reported again: %v", got)
	}
	if txt := SlackText(payloadOf(t, es[0])); !strings.Contains(txt, "GPU 3 of worker gpu-1 (w_1)") || !strings.Contains(txt, "XID 79") {
		t.Fatalf("slack text %q", txt)
	}
}

func TestSlackText(t *testing.T) {
	t.Parallel()
	started, ended := t0, t0.Add(2*time.Hour+13*time.Minute)
	j := store.Job{ID: "j_1", ConfigName: "<b>lora</b>", Status: protocol.JobFailed, WorkerID: "w_1", StartedAt: &started, EndedAt: &ended,
		Error: "OOM & more", CreatedAt: t0}
	p := Payload{Type: spec.JobFailed, Job: jobInfo(j, "https://o.example")}
	got := SlackText(p)
	want := ":x: Job <https://o.example/ui/jobs/j_1|j_1> (&lt;b&gt;lora&lt;/b&gt;) failed on worker w_1 after 2h13m0s: OOM &amp; more"
	if got != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
	if got := SlackText(Payload{Type: spec.JobCompleted, Job: jobInfo(j, "")}); !strings.HasPrefix(got, ":white_check_mark: Job j_1 ") {
		t.Fatalf("without a public URL: %s", got)
	}
}

// A delivery's stored payload, whatever it holds, renders or fails cleanly.
func FuzzRender(f *testing.F) {
	e := NewEmitter(nil)
	f.Add(string(e.JobInserted(store.Job{ID: "j_1", CreatedAt: t0})[0].Payload), true)
	f.Add(`{"type":"gpu.unhealthy","worker":{"id":"w"},"gpu":{"index":1}}`, true)
	f.Add(`[1,2]`, false)
	f.Fuzz(func(t *testing.T, payload string, slack bool) {
		d := store.WebhookDelivery{Payload: json.RawMessage(payload), Webhook: store.Webhook{Format: spec.FormatJSON}}
		if slack {
			d.Webhook.Format = spec.FormatSlack
		}
		body, err := render(d)
		if err != nil {
			return
		}
		if slack && !json.Valid(body) {
			t.Fatalf("slack body %q is not JSON", body)
		}
	})
}

// A create request of any shape is refused with a field error, or gives a
// subscription every part of which passes the checks.
func FuzzCheck(f *testing.F) {
	f.Add([]byte(`{"name":"ops","url":"https://hooks.example.com/x","events":["job.failed","worker.*"],"format":"slack"}`))
	f.Add([]byte(`{"name":"","url":"http://169.254.169.254/","events":["*"],"team":"x","secret":"short"}`))
	f.Add([]byte(`{"name":"a","url":"http://[::ffff:127.0.0.1]/","events":[]}`))
	svc := &Service{}
	svc.opt.Store(&Options{})
	f.Fuzz(func(t *testing.T, body []byte) {
		var req spec.CreateRequest
		if json.Unmarshal(body, &req) != nil {
			return
		}
		w, err := svc.Check(req)
		if err != nil {
			if _, ok := errors.AsType[*FieldError](err); !ok {
				t.Fatalf("not a field error: %v", err)
			}
			return
		}
		if spec.CheckName(w.Name) != nil || spec.CheckURL(w.URL, spec.Guard{}) != nil || len(w.Events) == 0 ||
			spec.CheckTeam(w.Team, svc.options().Teams) != nil || spec.CheckFormat(w.Format) != nil || len(w.Secret) < MinSecret {
			t.Fatalf("accepted %+v", w)
		}
		for _, e := range w.Events {
			if spec.CheckFilter(e) != nil {
				t.Fatalf("accepted event %q", e)
			}
		}
	})
}

// A held job makes job.approval_requested naming the rule; a decision
// makes job.approved then job.queued, or job.rejected then job.cancelled.
func TestApprovalEvents(t *testing.T) {
	t.Parallel()
	e := NewEmitter(nil)
	j := store.Job{ID: "j_1", Team: "nlp", ConfigName: "big", SubmittedBy: "person:p_m", Status: protocol.JobPendingApproval,
		Error: "", CreatedAt: t0, UpdatedAt: t0}
	r := store.ApprovalRequest{ID: 7, JobID: "j_1", RuleName: "gpus", Reason: "asks for 2 GPUs, more than 1", Status: store.ApprovalPending}
	es := e.JobHeld(j, r)
	if got := types(es); !slices.Equal(got, []string{spec.JobApprovalRequested}) || es[0].Team != "nlp" || es[0].Key != JobKey("j_1") {
		t.Fatalf("held: %v", got)
	}
	p := payloadOf(t, es[0])
	if a := p.Job.Approval; a == nil || a.RequestID != 7 || a.Rule != "gpus" || a.Reason != r.Reason || p.Job.Status != "pending_approval" {
		t.Fatalf("held payload %+v", p.Job)
	}
	if got := SlackText(p); !strings.Contains(got, "waits for approval (rule gpus): asks for 2 GPUs, more than 1") {
		t.Fatalf("slack: %s", got)
	}

	approved := j
	approved.Status, approved.UpdatedAt = protocol.JobQueued, t0.Add(time.Minute)
	r.Status, r.ReviewedBy, r.ReviewNotes = store.ApprovalApproved, "person:p_lead", "ok"
	es = e.ApprovalDecided(j, approved, r)
	if got := types(es); !slices.Equal(got, []string{spec.JobApproved, spec.JobQueued}) {
		t.Fatalf("approved: %v", got)
	}
	if a := payloadOf(t, es[0]).Job.Approval; a.By != "person:p_lead" || a.Status != "approved" {
		t.Fatalf("approved payload %+v", a)
	}

	rejected := j
	rejected.Status, rejected.Error = protocol.JobCancelled, "rejected by person:p_lead: too big"
	r.Status, r.ReviewNotes = store.ApprovalRejected, "too big"
	es = e.ApprovalDecided(j, rejected, r)
	if got := types(es); !slices.Equal(got, []string{spec.JobRejected, spec.JobCancelled}) {
		t.Fatalf("rejected: %v", got)
	}
	p = payloadOf(t, es[0])
	if p.Job.Approval.Notes != "too big" || p.Job.Error != rejected.Error {
		t.Fatalf("rejected payload %+v", p.Job)
	}
	if got := SlackText(p); !strings.Contains(got, "was rejected by person:p_lead: too big") {
		t.Fatalf("slack: %s", got)
	}
}
