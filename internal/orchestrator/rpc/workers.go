package rpc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/audit"
	"github.com/simpletuner/simpletuner-orchestration/internal/lifecycle"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator/diskfull"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator/labels"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator/transitions"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator/web"
	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
	"github.com/simpletuner/simpletuner-orchestration/internal/store"
)

// This file holds what the orchestrator decides about workers: what a
// registration resumes and abandons, what a heartbeat implies, when a worker
// is offline. Worker statuses follow the lifecycle's rule.

// registration is what a worker reported when it (re)registered.
type registration struct {
	req     protocol.RegisterRequest
	local   bool // attached through the admin socket
	ip      string
	session string // the workerd installation's id; "" when it sends none
}

// register records what the worker reports and reconciles the attempts it
// says it runs with what the store says it should run.
func (s *Protocol) register(ctx context.Context, wk store.Worker, reg registration) (protocol.RegisterResponse, error) {
	req := reg.req
	timeout := s.Options().HeartbeatTimeout
	// Another live installation with this token: refuse before touching its
	// stream or its attempts.
	if sessionHeld(wk, reg.session, time.Now(), timeout) {
		return protocol.RegisterResponse{}, s.refuseSession(ctx, wk, reg.session, reg.ip, "/api/workers/register")
	}
	// A new registration means any old stream is dead: close it first so the
	// scheduler cannot hand it a job while we reconcile.
	s.Notify.CloseWorkerStream(wk.ID, "worker registered again")

	reported := req.Running
	if len(reported) == 0 && req.CurrentJobID != nil && *req.CurrentJobID != "" {
		reported = []protocol.RunningAttempt{{JobID: *req.CurrentJobID}} // protocol 1: no attempt number
	}
	several := req.Protocol >= 2 && req.Capabilities != nil && req.Capabilities.MaxJobs > 0
	resume, abandon, err := s.reconcile(ctx, wk, reported, several)
	if err != nil {
		return protocol.RegisterResponse{}, err
	}
	now := time.Now().UTC()
	var tookOverFrom string
	inventoryIgnored := false
	updated, err := s.Store.UpdateWorker(ctx, wk.ID, func(cur *store.Worker) (*audit.Record, error) {
		if sessionHeld(*cur, reg.session, now, timeout) {
			return nil, errSessionHeld{*cur} // another installation registered meanwhile
		}
		tookOverFrom = ""
		if cur.Session != "" && reg.session != "" && cur.Session != reg.session {
			tookOverFrom = cur.Session
		}
		cur.Session = reg.session
		inventory, ignored := placementInventory(cur.GPUInfo, req.GPUInfo, cur.LabelsLocked)
		changes := reportedChanges(*cur, req, ignored)
		cur.Name = req.Name
		cur.GPUInfo, inventoryIgnored = inventory, ignored
		cur.Persistent = req.Persistent
		if req.Provider != nil && *req.Provider != "" {
			cur.Provider = *req.Provider
		}
		cur.Labels = labels.Placement(cur.Labels, cur.AdminLabels, req.Labels, cur.LabelsLocked)
		cur.Protocol = max(req.Protocol, 1)
		cur.AgentVersion = req.Version
		cur.Capabilities = protocol.Capabilities{}
		if req.Capabilities != nil {
			cur.Capabilities = *req.Capabilities
		}
		cur.Local = reg.local
		cur.LastHeartbeat = &now
		cur.CurrentJobID = ""
		if len(resume) > 0 {
			cur.CurrentJobID = resume[0].JobID
		}
		cur.Status = lifecycle.Alive(cur.Status, cur.Capacity().Load())
		details := map[string]any{"name": cur.Name, "protocol": cur.Protocol, "resume": resume, "abandon": abandon}
		for k, v := range changes {
			details[k] = v
		}
		if reg.session != "" {
			details["session"] = shortSession(reg.session)
		}
		if tookOverFrom != "" {
			details["session_taken_over_from"] = shortSession(tookOverFrom)
		}
		rec := audit.New(transitions.WorkerActor(wk), reg.ip, "worker.register", "worker", wk.ID, audit.Success, details)
		return &rec, nil
	})
	if held, ok := errors.AsType[errSessionHeld](err); ok {
		return protocol.RegisterResponse{}, s.refuseSession(ctx, held.wk, reg.session, reg.ip, "/api/workers/register")
	}
	if err != nil {
		return protocol.RegisterResponse{}, err
	}
	if updated, err = s.noteGPUConditions(ctx, updated, req.GPUConditions, reg.ip); err != nil {
		return protocol.RegisterResponse{}, err
	}
	if inventoryIgnored {
		s.Log.Warn("a worker whose labels an admin locked reports a larger GPU inventory than it had; placement keeps the "+
			"one it had (unlock and lock its labels again to take the new one)", "worker_id", wk.ID, "name", updated.Name, "ip", reg.ip)
	}
	if tookOverFrom != "" {
		s.Log.Warn("another workerd installation took over this worker: the previous one had gone offline",
			"worker_id", wk.ID, "name", updated.Name, "session", shortSession(reg.session), "previous_session", shortSession(tookOverFrom), "ip", reg.ip)
	}
	s.Log.Info("worker registered", "worker_id", wk.ID, "name", updated.Name, "protocol", updated.Protocol,
		"resumed", len(resume), "abandoned", len(abandon))
	for gpus := int64(updated.GPUInfo.Count); ; {
		cur := s.largestWorker.Load()
		if gpus <= cur || s.largestWorker.CompareAndSwap(cur, gpus) {
			break
		}
	}
	// A workerd whose configuration leaves its type unset adopts the admin's
	// from this reply: what it sent is no claim. SimpleTuner's agent (protocol
	// 1) always keeps its own.
	ownType := req.Protocol < 2 || (req.Capabilities != nil && req.Capabilities.OwnType)
	if reportedType := typeOf(req.Persistent); ownType && reportedType != updated.Type {
		s.Log.Warn("the worker's configuration sets another type than an admin gave it",
			"worker_id", wk.ID, "name", updated.Name, "worker_type", updated.Type, "reported", reportedType)
	}

	opt := s.Options()
	resp := protocol.RegisterResponse{WorkerID: wk.ID, SSEURL: "/api/workers/stream?worker_id=" + wk.ID}
	if len(resume) > 0 {
		if j, err := s.Store.GetJob(ctx, resume[0].JobID); err == nil {
			resp.ResumeJob = &protocol.ResumeJob{JobID: j.ID, ConfigName: j.ConfigName, Status: string(j.Status), Attempt: j.Attempt}
		}
	}
	if len(abandon) > 0 {
		resp.AbandonJob = &abandon[0].JobID
	}
	if req.Protocol >= 2 {
		resp.Protocol = protocol.Version
		resp.HeartbeatIntervalSeconds = opt.HeartbeatInterval.Seconds()
		resp.HeartbeatTimeoutSeconds = opt.HeartbeatTimeout.Seconds()
		resp.PingIntervalSeconds = opt.PingInterval.Seconds()
		resp.Resume, resp.Abandon = resume, abandon
		resp.WorkerType = updated.Type
	}
	return resp, nil
}

func typeOf(persistent bool) protocol.WorkerType {
	if persistent {
		return protocol.Persistent
	}
	return protocol.Ephemeral
}

// placementInventory is the GPU inventory jobs are placed against after a
// worker reported reported. A worker whose labels an admin locked cannot
// advertise its way into jobs meant for others with its GPUs either: its
// inventory is the first one it reported after the lock, and a later report
// is taken only when it could run no job the current one could not (fewer
// GPUs, none larger: a GPU lost to a fault). A larger one is ignored (on
// record, see reportedChanges) until an admin unlocks and locks again.
func placementInventory(current store.GPUInfo, reported json.RawMessage, locked bool) (store.GPUInfo, bool) {
	r := store.ReadGPUInfo(reported)
	if !locked || canonicalJSON(current.Raw) == "{}" || inventoryWithin(r.GPUSummary, current.GPUSummary) {
		return r, false
	}
	return current, true
}

// inventoryWithin reports whether every job that fits r fits p too: r has
// no more GPUs than p, and its k-th largest GPU is no larger than p's.
func inventoryWithin(r, p protocol.GPUSummary) bool {
	if len(r.Devices) > len(p.Devices) {
		return false
	}
	mem := func(g protocol.GPUSummary) []uint64 {
		out := make([]uint64, len(g.Devices))
		for i, d := range g.Devices {
			out[i] = d.MemoryMiB
		}
		slices.Sort(out)
		slices.Reverse(out)
		return out
	}
	rm, pm := mem(r), mem(p)
	for i := range rm {
		if rm[i] > pm[i] {
			return false
		}
	}
	return true
}

// reportedChanges describes, for the registration's audit record, how what
// the worker reports for placement changed: its labels (as far as they take
// part: an admin's keys win, and a locked worker's are ignored) and its GPU
// inventory. Since these decide which jobs, and which jobs' secrets, a
// worker gets, every change is on record. Nothing changed: nil.
func reportedChanges(cur store.Worker, req protocol.RegisterRequest, inventoryIgnored bool) map[string]any {
	out := map[string]any{}
	before := labels.Reported(cur.Labels, cur.AdminLabels)
	after := labels.Reported(labels.Placement(cur.Labels, cur.AdminLabels, req.Labels, cur.LabelsLocked), cur.AdminLabels)
	if !maps.Equal(before, after) {
		out["reported_labels_before"], out["reported_labels_after"] = before, after
	}
	if cur.LabelsLocked {
		if ignored := labels.Reported(req.Labels, cur.AdminLabels); len(ignored) > 0 {
			out["reported_labels_ignored"] = ignored // locked: on record, not used
		}
	}
	if b, a := canonicalJSON(cur.GPUInfo.Raw), canonicalJSON(req.GPUInfo); b != a {
		if inventoryIgnored {
			out["gpu_info_ignored"] = json.RawMessage(a) // locked: on record, not used
		} else {
			out["gpu_info_before"], out["gpu_info_after"] = json.RawMessage(b), json.RawMessage(a)
		}
	}
	return out
}

// canonicalJSON re-encodes a JSON value with sorted keys, so that two
// spellings of the same inventory compare equal; "" and null read as {}.
func canonicalJSON(raw json.RawMessage) string {
	var v any
	if len(raw) == 0 || json.Unmarshal(raw, &v) != nil || v == nil {
		return "{}"
	}
	b, err := json.Marshal(v)
	if err != nil {
		return "{}"
	}
	return string(b)
}

// reconcile decides, for each attempt the worker reports (running or
// finishing), whether it resumes (it is the job's current attempt, on this
// worker, not ended) or is abandoned; attempts the store has out on this
// worker that it no longer reports are lost. A worker that runs one job at a
// time (several false) resumes one at most.
func (s *Protocol) reconcile(ctx context.Context, wk store.Worker, reported []protocol.RunningAttempt, several bool) (resume, abandon []protocol.RunningAttempt, err error) {
	seen := map[string]bool{}
	for _, ra := range reported {
		if ra.JobID == "" || seen[ra.JobID] {
			continue
		}
		seen[ra.JobID] = true
		j, err := s.Store.GetJob(ctx, ra.JobID)
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			return nil, nil, err
		}
		ok := err == nil && lifecycle.Resumable(j.Facts(), j.WorkerID == wk.ID, ra.Attempt)
		if ok && (several || len(resume) == 0) {
			resume = append(resume, protocol.RunningAttempt{JobID: j.ID, Attempt: j.Attempt, State: ra.State})
			continue
		}
		abandon = append(abandon, ra)
	}
	active, err := s.Moves.ActiveOn(ctx, wk.ID)
	if err != nil {
		return nil, nil, err
	}
	for _, j := range active {
		if slices.ContainsFunc(resume, func(r protocol.RunningAttempt) bool { return r.JobID == j.ID }) {
			continue
		}
		if err := s.Moves.LoseAttempt(ctx, j.ID, wk.ID, fmt.Sprintf("worker %s re-registered without it", wk.ID)); err != nil {
			return nil, nil, err
		}
	}
	return resume, abandon, nil
}

// streamOpened records that this instance holds the worker's stream; a worker
// that was offline is back.
func (s *Protocol) streamOpened(ctx context.Context, workerID string) error {
	now := time.Now().UTC()
	instance := s.Options().InstanceID
	_, err := s.Store.UpdateWorker(ctx, workerID, func(cur *store.Worker) (*audit.Record, error) {
		cur.ConnectedAt, cur.StreamInstance = &now, instance
		cur.Status = lifecycle.Alive(cur.Status, cur.Capacity().Load())
		return nil, nil
	})
	return err
}

// streamClosed clears the marker of the stream this instance held. Only the
// current stream does this: a replaced one must not.
func (s *Protocol) streamClosed(workerID string) {
	instance := s.Options().InstanceID
	bg, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, _ = s.Store.UpdateWorker(bg, workerID, func(cur *store.Worker) (*audit.Record, error) {
		if cur.StreamInstance == instance {
			cur.StreamInstance = ""
		}
		return nil, nil
	})
}

// heartbeat records liveness and returns the reply: what the worker should
// stop and whether it is draining. The reported status is only a hint: the
// worker's status is derived from the store, so a heartbeat never undoes a
// Drain.
func (s *Protocol) heartbeat(ctx context.Context, wk store.Worker, req protocol.HeartbeatRequest) (protocol.HeartbeatResponse, error) {
	s.Metrics.Heartbeats.Add(1)
	now := time.Now().UTC()
	s.Heard.SetTelemetry(wk.ID, req.GPUs, now)
	s.GPUHistory.NoteTelemetry(wk.ID, req.GPUs, inventoryIndexes(wk), now)
	wk, err := s.noteGPUConditions(ctx, wk, req.GPUConditions, "")
	if err != nil {
		return protocol.HeartbeatResponse{}, err
	}
	var drainedByWorker bool
	updated, err := s.Store.UpdateWorker(ctx, wk.ID, func(cur *store.Worker) (*audit.Record, error) {
		cur.LastHeartbeat = &now
		cur.Status = lifecycle.Alive(cur.Status, cur.Capacity().Load())
		// A worker draining on its own (a stop signal) says so: no job is
		// dispatched to it any more. Only an admin's resume undoes a drain.
		if drainedByWorker = req.Status == string(protocol.WorkerDraining) && cur.Status != protocol.WorkerDraining; drainedByWorker {
			cur.Status = protocol.WorkerDraining
			rec := audit.New(transitions.WorkerActor(wk), "", "worker.drain", "worker", wk.ID, audit.Success,
				map[string]string{"name": cur.Name, "by": "the worker itself (a stop signal)"})
			return &rec, nil
		}
		return nil, nil
	})
	switch {
	case err == nil:
		s.Heard.BeatStored(wk.ID)
	case errors.Is(err, store.ErrDiskFull):
		// The worker is alive all the same: keep that in memory.
		s.Disk.Note(diskfull.Database, err)
		s.Heard.KeepBeat(wk.ID, now)
		updated, updated.LastHeartbeat = wk, &now
	default:
		return protocol.HeartbeatResponse{}, err
	}
	if drainedByWorker {
		s.Log.Info("the worker drains on its own: no new job goes to it", "worker_id", wk.ID, "name", updated.Name)
	}
	resp := protocol.HeartbeatResponse{Success: true, Drain: updated.Status == protocol.WorkerDraining, ClearGPUs: updated.GPUClears}
	resp.Cancel, err = s.heartbeatVerdict(ctx, updated, req)
	return resp, err
}

// heartbeatVerdict lists the jobs the worker should stop: its canceling jobs,
// and anything it runs whose attempt is no longer its own. A running job the
// worker stops listing is lost, but only once two heartbeats in a row left it
// out: a heartbeat composed just before a job arrived can be delivered after
// the job's acknowledgement, and the next one, composed later, lists it.
// Attempts the worker lists as finishing are present: their report is on the
// way.
func (s *Protocol) heartbeatVerdict(ctx context.Context, wk store.Worker, req protocol.HeartbeatRequest) ([]string, error) {
	listed := map[string]protocol.RunningAttempt{}
	for _, ra := range req.Running {
		listed[ra.JobID] = ra
	}
	if req.CurrentJobID != nil && *req.CurrentJobID != "" {
		if _, ok := listed[*req.CurrentJobID]; !ok {
			listed[*req.CurrentJobID] = protocol.RunningAttempt{JobID: *req.CurrentJobID}
		}
	}
	var cancel []string
	for jobID, ra := range listed {
		if ra.Finishing() {
			continue // its process is gone; only the report is outstanding
		}
		j, err := s.Store.GetJob(ctx, jobID)
		if errors.Is(err, store.ErrNotFound) {
			cancel = append(cancel, jobID)
			continue
		}
		if err != nil {
			return nil, err
		}
		if !lifecycle.Resumable(j.Facts(), j.WorkerID == wk.ID, ra.Attempt) || j.Status == protocol.JobCanceling {
			cancel = append(cancel, jobID)
		}
	}
	active, err := s.Moves.ActiveOn(ctx, wk.ID)
	if err != nil {
		return nil, err
	}
	var absent []store.Job
	for _, j := range active {
		if _, ok := listed[j.ID]; ok {
			continue
		}
		switch j.Status {
		case protocol.JobCanceling:
			cancel = append(cancel, j.ID)
		case protocol.JobRunning:
			absent = append(absent, j)
		}
	}
	for _, j := range s.Heard.LostAttempts(wk.ID, absent) {
		if err := s.Moves.LoseAttempt(ctx, j.ID, wk.ID, "the worker's last two heartbeats no longer list it"); err != nil {
			return nil, err
		}
	}
	return cancel, nil
}

// markOffline closes the worker's stream, sets it offline and ends the
// attempts it held.
func (s *Protocol) markOffline(ctx context.Context, workerID, actor, ip, why string) error {
	s.Notify.CloseWorkerStream(workerID, why)
	wk, err := s.Store.UpdateWorker(ctx, workerID, func(cur *store.Worker) (*audit.Record, error) {
		if cur.Status == protocol.WorkerOffline {
			return nil, nil
		}
		cur.Status = protocol.WorkerOffline
		cur.StreamInstance = ""
		rec := audit.New(actor, ip, "worker.offline", "worker", workerID, audit.Success, map[string]string{"reason": why})
		return &rec, nil
	})
	if err != nil {
		return err
	}
	s.Heard.Offline(workerID)
	s.Log.Info("worker offline", "worker_id", workerID, "reason", why)
	return s.Moves.LoseAll(ctx, wk.ID, fmt.Sprintf("worker %s (%s) went offline: %s", wk.ID, wk.Name, why))
}

// Drain stops a worker from taking new jobs; resume undoes it.
func (s *Protocol) Drain(ctx context.Context, id, actor, ip string) (store.Worker, error) {
	wk, err := s.Store.UpdateWorker(ctx, id, func(cur *store.Worker) (*audit.Record, error) {
		cur.Status = protocol.WorkerDraining
		rec := audit.New(actor, ip, "worker.drain", "worker", id, audit.Success, map[string]string{"name": cur.Name})
		return &rec, nil
	})
	if err != nil {
		return wk, err
	}
	s.Notify.SendToWorker(id, protocol.EventDrain, protocol.DrainEvent{Type: protocol.EventDrain, Reason: "drained by " + actor})
	if wk.Type == protocol.Ephemeral && wk.CurrentJobID == "" {
		s.Notify.SendToWorker(id, protocol.EventShutdown, protocol.NewShutdownEvent("drained"))
	}
	return wk, nil
}

func (s *Protocol) Resume(ctx context.Context, id, actor, ip string) (store.Worker, error) {
	wk, err := s.Store.UpdateWorker(ctx, id, func(cur *store.Worker) (*audit.Record, error) {
		if cur.Status != protocol.WorkerDraining {
			return nil, web.Conflict("worker %s is %s, not draining", id, cur.Status)
		}
		cur.Status = lifecycle.Resumed(cur.Capacity().Load(), cur.LastHeartbeat != nil)
		rec := audit.New(actor, ip, "worker.resume", "worker", id, audit.Success, map[string]string{"name": cur.Name})
		return &rec, nil
	})
	if err == nil {
		s.Wake()
	}
	return wk, err
}

// Evict deletes a worker at an admin's request: its stream is told to
// shut down and closed, its attempts end (requeued without spending a retry).
func (s *Protocol) Evict(ctx context.Context, wk store.Worker, actor, ip string) error {
	s.Notify.SendToWorker(wk.ID, protocol.EventShutdown, protocol.NewShutdownEvent("worker_deleted"))
	s.Notify.CloseWorkerStream(wk.ID, "worker deleted")
	active, err := s.Moves.ActiveOn(ctx, wk.ID)
	if err != nil {
		return err
	}
	for _, j := range active {
		if err := s.Moves.EvictAttempt(ctx, j.ID, wk.ID, "worker "+wk.ID+" was deleted by an admin", actor, ip); err != nil {
			return err
		}
	}
	s.Heard.ForgetAttempts(wk.ID)
	return nil
}

// Shown is the status and connection a worker is shown with: a worker that
// holds no stream on any instance and missed its last heartbeat looks
// disconnected at once, though the store keeps it idle, partial, busy or draining
// (and its attempts) until the heartbeat timeout.
func (s *Protocol) Shown(w store.Worker) (status protocol.WorkerStatus, connected bool) {
	opt := s.Options()
	connected = s.Hub.Connected(w.ID) || (w.StreamInstance != "" && w.StreamInstance != opt.InstanceID)
	status = w.Status
	// A draining worker stays "draining" (an admin's intent that resume
	// undoes); connected says whether it is there.
	if lifecycle.Working(status) && !connected && s.heartbeatMissed(w) {
		status = protocol.WorkerDisconnected
	}
	return status, connected
}

// heartbeatMissed reports whether a worker's last heartbeat is overdue, or
// it never sent one.
func (s *Protocol) heartbeatMissed(w store.Worker) bool {
	opt := s.Options()
	return w.LastHeartbeat == nil || time.Since(*w.LastHeartbeat) > opt.HeartbeatInterval+opt.HeartbeatInterval/2
}

// Deletable says why a worker may not be deleted without force, or nil. A
// worker out of touch (no stream, and its heartbeat overdue or never sent;
// or offline) with no attempt out may go, whatever an admin set: one that
// never connected, drained or not, runs nothing.
func (s *Protocol) Deletable(ctx context.Context, w store.Worker) error {
	status, connected := s.Shown(w)
	if status != protocol.WorkerOffline && (connected || !s.heartbeatMissed(w)) {
		return web.Conflict("worker %s is %s and in touch (its stream is open or its heartbeats arrive); only a worker with no live connection "+
			"can be deleted without force, which requeues its jobs", w.ID, status)
	}
	active, err := s.Moves.ActiveOn(ctx, w.ID)
	if err != nil {
		return err
	}
	if len(active) > 0 {
		return web.Conflict("worker %s is %s but still holds job %s; wait for the heartbeat timeout, or delete it with force (its job is requeued)",
			w.ID, status, active[0].ID)
	}
	return nil
}
