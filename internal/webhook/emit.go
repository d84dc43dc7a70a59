package webhook

import (
	"encoding/json"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/audit"
	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
	"github.com/simpletuner/simpletuner-orchestration/internal/store"
	"github.com/simpletuner/simpletuner-orchestration/internal/webhook/spec"
)

// Emitter turns the changes the store applies into events: it is the
// store's Outbox, so every change of a job's state, every worker going
// offline or coming back and every GPU fenced makes its event in the
// change's own transaction, whichever code path made the change.
type Emitter struct {
	base atomic.Pointer[string]
	wake func()
	gpus *gpuGate
}

var (
	_ store.Outbox         = (*Emitter)(nil)
	_ store.ApprovalOutbox = (*Emitter)(nil)
)

// NewEmitter returns an Emitter that calls wake when events were committed.
func NewEmitter(wake func()) *Emitter {
	e := &Emitter{wake: wake, gpus: newGPUGate()}
	e.SetBaseURL("")
	return e
}

// SetBaseURL sets the public URL the events' links start with ("" for
// paths on the orchestrator).
func (e *Emitter) SetBaseURL(u string) { e.base.Store(&u) }

func (e *Emitter) baseURL() string { return *e.base.Load() }

// Committed wakes the senders.
func (e *Emitter) Committed() {
	if e.wake != nil {
		e.wake()
	}
}

func (e *Emitter) job(typ string, j store.Job, at time.Time, edit func(*JobInfo)) store.OutboxEvent {
	info := jobInfo(j, e.baseURL())
	if edit != nil {
		edit(info)
	}
	return event(Payload{Type: typ, Job: info}, JobKey(j.ID), teamOf(j), at)
}

// CheckpointKept: checkpoint.saved, once the orchestrator checked every
// file of it: a retry now resumes from it.
func (e *Emitter) CheckpointKept(j store.Job, c store.Checkpoint) []store.OutboxEvent {
	link := e.baseURL() + "/api/queue/" + j.ID + "/artifacts?attempt=" + strconv.Itoa(c.Attempt)
	return []store.OutboxEvent{CheckpointSaved(j, CheckpointInfo{Attempt: c.Attempt, Path: "checkpoints/" + c.Name,
		Bytes: c.Bytes, Link: link}, e.baseURL(), c.CreatedAt)}
}

// JobInserted: job.queued.
func (e *Emitter) JobInserted(j store.Job) []store.OutboxEvent {
	return []store.OutboxEvent{e.job(spec.JobQueued, j, j.CreatedAt, nil)}
}

// JobHeld: job.approval_requested, for a job an approval rule held.
func (e *Emitter) JobHeld(j store.Job, r store.ApprovalRequest) []store.OutboxEvent {
	return []store.OutboxEvent{e.job(spec.JobApprovalRequested, j, j.CreatedAt, func(i *JobInfo) { i.Approval = approvalInfo(r) })}
}

// ApprovalDecided: job.approved then job.queued (or job.approved alone for
// a job that now waits for its dependencies), or job.rejected then
// job.cancelled.
func (e *Emitter) ApprovalDecided(before, after store.Job, r store.ApprovalRequest) []store.OutboxEvent {
	at := after.UpdatedAt
	with := func(i *JobInfo) { i.Approval = approvalInfo(r) }
	switch after.Status {
	case protocol.JobQueued:
		return []store.OutboxEvent{e.job(spec.JobApproved, after, at, with), e.job(spec.JobQueued, after, at, nil)}
	case protocol.JobWaiting: // job.released follows when its dependencies are met
		return []store.OutboxEvent{e.job(spec.JobApproved, after, at, with)}
	}
	return []store.OutboxEvent{e.job(spec.JobRejected, after, at, with), e.job(spec.JobCancelled, after, at, nil)}
}

func approvalInfo(r store.ApprovalRequest) *ApprovalInfo {
	return &ApprovalInfo{RequestID: r.ID, Rule: r.RuleName, Reason: r.Reason, Status: r.Status, By: r.ReviewedBy, Notes: r.ReviewNotes}
}

// terminal maps an end state to its event.
var terminal = map[protocol.JobStatus]string{
	protocol.JobCompleted: spec.JobCompleted,
	protocol.JobFailed:    spec.JobFailed,
	protocol.JobCancelled: spec.JobCancelled,
}

// JobMoved: job.started when an attempt is acknowledged; job.completed,
// failed or cancelled at the end; job.requeued when an attempt ends with
// the job back in the queue; job.released when a waiting job joins it. A move that acknowledges and ends an attempt
// at once (a job that finished before its start was reported) makes both,
// started first. Claims, cancels under way and progress make none.
func (e *Emitter) JobMoved(before, after store.Job, t *store.JobTransition) []store.OutboxEvent {
	at := after.UpdatedAt
	outcome := string(t.EndAttempt)
	var out []store.OutboxEvent
	if t.Ack {
		out = append(out, e.job(spec.JobStarted, after, at, func(i *JobInfo) {
			i.Status, i.EndedAt, i.Error = string(protocol.JobRunning), "", ""
		}))
	}
	switch {
	case terminal[after.Status] != "":
		out = append(out, e.job(terminal[after.Status], after, at, func(i *JobInfo) { i.Outcome = outcome }))
	case after.Status == protocol.JobQueued && before.Status == protocol.JobWaiting:
		out = append(out, e.job(spec.JobReleased, after, at, nil))
	case after.Status == protocol.JobQueued && before.Status != protocol.JobQueued:
		name := spec.JobRequeued
		if t.EndAttempt == protocol.OutcomePreempted {
			name = spec.JobPreempted
		}
		out = append(out, e.job(name, after, at, func(i *JobInfo) {
			i.Outcome, i.Reason, i.Error, i.WorkerID = outcome, after.Error, "", before.WorkerID
		}))
	}
	return out
}

// WorkerChanged: worker.offline and worker.online when a worker's status
// crosses offline, gpu.unhealthy for each GPU newly fenced (at most one per
// GPU and window; see gpuGate).
func (e *Emitter) WorkerChanged(before, after store.Worker, rec *audit.Record) []store.OutboxEvent {
	at := time.Now().UTC()
	key := WorkerKey(after.ID)
	var out []store.OutboxEvent
	wasOff, isOff := before.Status == protocol.WorkerOffline, after.Status == protocol.WorkerOffline
	switch {
	case isOff && !wasOff:
		info := workerInfo(after)
		info.Reason = reasonOf(rec)
		out = append(out, event(Payload{Type: spec.WorkerOffline, Worker: info}, key, "", at))
	case wasOff && !isOff:
		out = append(out, event(Payload{Type: spec.WorkerOnline, Worker: workerInfo(after)}, key, "", at))
	}
	for _, c := range after.GPUConditions {
		if c.State != protocol.GPUUnhealthy || unhealthy(before, c.Index) {
			continue
		}
		ev := event(Payload{Type: spec.GPUUnhealthy, Worker: workerInfo(after),
			GPU: &GPUInfo{Index: c.Index, UUID: c.UUID, State: c.State, Reason: c.Reason}}, key, "", at)
		if e.gpus.admit(gpuKey{after.ID, c.Index}, ev) {
			out = append(out, ev)
		}
	}
	for _, c := range before.GPUConditions {
		if c.State == protocol.GPUUnhealthy && !unhealthy(after, c.Index) {
			e.gpus.lifted(gpuKey{after.ID, c.Index})
		}
	}
	return out
}

// unhealthy reports whether GPU i of w is fenced as unhealthy.
func unhealthy(w store.Worker, i int) bool {
	return slices.ContainsFunc(w.GPUConditions, func(c protocol.GPUCondition) bool {
		return c.Index == i && c.State == protocol.GPUUnhealthy
	})
}

// SetGPUEventWindow sets how far apart two gpu.unhealthy events of one GPU
// are at least (DefaultGPUEventWindow when d is not positive).
func (e *Emitter) SetGPUEventWindow(d time.Duration) {
	if d <= 0 {
		d = DefaultGPUEventWindow
	}
	e.gpus.window.Store(int64(d))
}

// SetHeldEventWriter sets what writes a gpu.unhealthy event held to the
// end of its GPU's window: in a transaction of its own, as
// store.Webhooks.EmitEvents does. Without one, held events are dropped.
func (e *Emitter) SetHeldEventWriter(write func([]store.OutboxEvent)) { e.gpus.send.Store(&write) }

// Close ends the GPUs' windows; the events they hold are dropped.
func (e *Emitter) Close() { e.gpus.close() }

// reasonOf is the "reason" an audit record's details give, if any.
func reasonOf(rec *audit.Record) string {
	if rec == nil {
		return ""
	}
	var d struct {
		Reason string `json:"reason"`
	}
	_ = json.Unmarshal(rec.Details, &d) // details are JSON objects; no reason, no text
	return d.Reason
}
