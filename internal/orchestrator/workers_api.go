package orchestrator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/julienschmidt/httprouter"

	"github.com/simpletuner/simpletuner-orchestration/internal/audit"
	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
	"github.com/simpletuner/simpletuner-orchestration/internal/store"
)

func workerActor(wk store.Worker) string { return "worker:" + wk.ID }

// register records what the worker reports and reconciles the jobs it says it
// runs with what the store says it should run.
func (s *Server) register(w http.ResponseWriter, r *http.Request, _ httprouter.Params, wk store.Worker) error {
	var req protocol.RegisterRequest
	if err := s.decodeJSON(w, r, &req); err != nil {
		return err
	}
	if strings.TrimSpace(req.Name) == "" {
		return invalid("field \"name\" is required")
	}
	if len(req.GPUInfo) > 0 && string(req.GPUInfo) != "null" {
		var obj map[string]any
		if json.Unmarshal(req.GPUInfo, &obj) != nil {
			return invalid("field \"gpu_info\" must be an object")
		}
	} else {
		req.GPUInfo = json.RawMessage(`{}`)
	}
	ctx := r.Context()
	// A new registration means any old stream is dead: close it first so the
	// scheduler cannot hand it a job while we reconcile.
	s.closeWorkerStream(wk.ID, "worker registered again")

	reported := req.Running
	if len(reported) == 0 && req.CurrentJobID != nil && *req.CurrentJobID != "" {
		reported = []protocol.RunningAttempt{{JobID: *req.CurrentJobID}} // protocol 1: no attempt number
	}
	resume, abandon, err := s.reconcile(ctx, wk, reported)
	if err != nil {
		return err
	}

	now := time.Now().UTC()
	local := false
	if _, ok := peerOf(r); ok {
		local = true
	}
	updated, err := s.store.UpdateWorker(ctx, wk.ID, func(cur *store.Worker) (*audit.Record, error) {
		cur.Name = strings.TrimSpace(req.Name)
		cur.GPUInfo = req.GPUInfo
		cur.Persistent = req.Persistent
		if req.Provider != nil && *req.Provider != "" {
			cur.Provider = *req.Provider
		}
		cur.Labels = mergeLabels(cur.Labels, cur.AdminLabels, req.Labels)
		cur.Protocol = max(req.Protocol, 1)
		cur.AgentVersion = req.Version
		cur.Local = local
		cur.LastHeartbeat = &now
		cur.CurrentJobID = ""
		if len(resume) > 0 {
			cur.CurrentJobID = resume[0].JobID
		}
		if cur.Status != protocol.WorkerDraining {
			cur.Status = protocol.WorkerIdle
			if cur.CurrentJobID != "" {
				cur.Status = protocol.WorkerBusy
			}
		}
		rec := audit.New(workerActor(wk), peerIP(r), "worker.register", "worker", wk.ID, audit.Success,
			map[string]any{"name": cur.Name, "protocol": cur.Protocol, "resume": resume, "abandon": abandon})
		return &rec, nil
	})
	if err != nil {
		return err
	}
	s.log.Info("worker registered", "worker_id", wk.ID, "name", updated.Name, "protocol", updated.Protocol,
		"resumed", len(resume), "abandoned", len(abandon))

	opt := s.options()
	resp := protocol.RegisterResponse{WorkerID: wk.ID, SSEURL: "/api/workers/stream?worker_id=" + wk.ID}
	if len(resume) > 0 {
		j, err := s.store.GetJob(ctx, resume[0].JobID)
		if err == nil {
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
		resp.Resume, resp.Abandon = resume, abandon
	}
	writeJSON(w, http.StatusOK, resp)
	return nil
}

// mergeLabels lays reported labels over the current ones, except that a key an
// admin set is never overridden by the worker.
func mergeLabels(current, admin, reported map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range current {
		out[k] = v
	}
	for k, v := range reported {
		if _, adminOwned := admin[k]; !adminOwned {
			out[k] = v
		}
	}
	for k, v := range admin {
		out[k] = v
	}
	return out
}

// reconcile decides, for each job the worker reports, whether it resumes (its
// current attempt is this worker's and not terminal) or is abandoned; jobs the
// store has on this worker that it no longer reports are lost.
func (s *Server) reconcile(ctx context.Context, wk store.Worker, reported []protocol.RunningAttempt) (resume, abandon []protocol.RunningAttempt, err error) {
	seen := map[string]bool{}
	for _, ra := range reported {
		if ra.JobID == "" || seen[ra.JobID] {
			continue
		}
		seen[ra.JobID] = true
		j, err := s.store.GetJob(ctx, ra.JobID)
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			return nil, nil, err
		}
		ok := err == nil && j.WorkerID == wk.ID && j.Status.Active() && (ra.Attempt == 0 || ra.Attempt == j.Attempt)
		if ok && len(resume) == 0 { // a worker runs one job at a time
			resume = append(resume, protocol.RunningAttempt{JobID: j.ID, Attempt: j.Attempt})
			continue
		}
		abandon = append(abandon, ra)
	}
	active, _, err := s.store.ListJobs(ctx, store.JobFilter{WorkerID: wk.ID, Statuses: activeStatuses})
	if err != nil {
		return nil, nil, err
	}
	for _, j := range active {
		if len(resume) > 0 && resume[0].JobID == j.ID {
			continue
		}
		if err := s.loseAttempt(ctx, j.ID, wk.ID, fmt.Sprintf("worker %s re-registered without it", wk.ID)); err != nil {
			return nil, nil, err
		}
	}
	return resume, abandon, nil
}

var activeStatuses = []protocol.JobStatus{protocol.JobDispatched, protocol.JobRunning, protocol.JobCanceling}

// stream holds the worker's SSE connection open and writes its events.
func (s *Server) stream(w http.ResponseWriter, r *http.Request, _ httprouter.Params, wk store.Worker) error {
	id := r.URL.Query().Get("worker_id")
	if id == "" {
		return invalid("query parameter \"worker_id\" is required")
	}
	if id != wk.ID {
		return errorf(http.StatusBadRequest, protocol.CodeInvalidRequest, "Worker ID mismatch: the token belongs to another worker")
	}
	rc := http.NewResponseController(w)
	// SSE lives longer than any server-wide write timeout; each write gets its own deadline below.
	_ = rc.SetWriteDeadline(time.Time{})

	ctx := r.Context()
	now := time.Now().UTC()
	instance := s.options().InstanceID
	if _, err := s.store.UpdateWorker(ctx, wk.ID, func(cur *store.Worker) (*audit.Record, error) {
		cur.ConnectedAt, cur.StreamInstance = &now, instance
		if cur.Status == protocol.WorkerOffline || cur.Status == protocol.WorkerConnecting {
			cur.Status = protocol.WorkerIdle
			if cur.CurrentJobID != "" {
				cur.Status = protocol.WorkerBusy
			}
		}
		return nil, nil
	}); err != nil {
		return err
	}
	st := s.hub.Attach(wk.ID)
	defer func() {
		if s.hub.Detach(st) {
			// Only the current stream clears the marker; a replaced one must not.
			bg, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_, _ = s.store.UpdateWorker(bg, wk.ID, func(cur *store.Worker) (*audit.Record, error) {
				if cur.StreamInstance == instance {
					cur.StreamInstance = ""
				}
				return nil, nil
			})
		}
		s.log.Debug("worker stream closed", "worker_id", wk.ID, "reason", st.Reason())
	}()

	h := w.Header()
	h.Set("Content-Type", "text/event-stream; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	h.Set("Connection", "keep-alive")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	if err := rc.Flush(); err != nil {
		return nil
	}
	s.log.Info("worker stream opened", "worker_id", wk.ID)
	s.Wake()

	write := func(frame []byte) bool {
		_ = rc.SetWriteDeadline(time.Now().Add(30 * time.Second))
		if _, err := w.Write(frame); err != nil {
			return false
		}
		return rc.Flush() == nil
	}
	ping := s.options().PingInterval
	timer := time.NewTimer(ping)
	defer timer.Stop()
	pingFrame := []byte("event: ping\ndata: {\"type\":\"ping\"}\n\n")
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-st.Done():
			return nil
		case frame := <-st.Events():
			if !write(frame) {
				return nil
			}
		case <-timer.C:
			if !write(pingFrame) {
				return nil
			}
		}
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
		timer.Reset(ping)
	}
}

// heartbeat records liveness. The reported status is only a hint: the worker's
// status is derived from the store, so a heartbeat never undoes a drain.
func (s *Server) heartbeat(w http.ResponseWriter, r *http.Request, _ httprouter.Params, wk store.Worker) error {
	var req protocol.HeartbeatRequest
	if err := s.decodeJSON(w, r, &req); err != nil {
		return err
	}
	if req.WorkerID == "" {
		return invalid("field \"worker_id\" is required")
	}
	if req.WorkerID != wk.ID {
		return errorf(http.StatusBadRequest, protocol.CodeInvalidRequest, "Worker ID mismatch: the token belongs to another worker")
	}
	s.metrics.Heartbeats.Add(1)
	ctx := r.Context()
	now := time.Now().UTC()
	s.telemetry.set(wk.ID, req.GPUs, now)
	updated, err := s.store.UpdateWorker(ctx, wk.ID, func(cur *store.Worker) (*audit.Record, error) {
		cur.LastHeartbeat = &now
		switch cur.Status {
		case protocol.WorkerDraining:
		case protocol.WorkerOffline, protocol.WorkerConnecting, protocol.WorkerIdle, protocol.WorkerBusy:
			cur.Status = protocol.WorkerIdle
			if cur.CurrentJobID != "" {
				cur.Status = protocol.WorkerBusy
			}
		}
		return nil, nil
	})
	if err != nil {
		return err
	}
	resp := protocol.HeartbeatResponse{Success: true, Drain: updated.Status == protocol.WorkerDraining}
	resp.Cancel, err = s.heartbeatCancels(ctx, updated, req)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, resp)
	return nil
}

// heartbeatCancels lists the jobs the worker should stop: its canceling jobs,
// and anything it runs whose attempt is no longer its own. A running job the
// worker no longer reports is lost (upstream's bug B9).
func (s *Server) heartbeatCancels(ctx context.Context, wk store.Worker, req protocol.HeartbeatRequest) ([]string, error) {
	running := map[string]int{}
	for _, ra := range req.Running {
		running[ra.JobID] = ra.Attempt
	}
	if req.CurrentJobID != nil && *req.CurrentJobID != "" {
		if _, ok := running[*req.CurrentJobID]; !ok {
			running[*req.CurrentJobID] = 0
		}
	}
	var cancel []string
	for jobID, attempt := range running {
		j, err := s.store.GetJob(ctx, jobID)
		if errors.Is(err, store.ErrNotFound) {
			cancel = append(cancel, jobID)
			continue
		}
		if err != nil {
			return nil, err
		}
		mine := j.WorkerID == wk.ID && (attempt == 0 || attempt == j.Attempt)
		if !mine || j.Status.Terminal() || j.Status == protocol.JobCanceling {
			cancel = append(cancel, jobID)
		}
	}
	active, _, err := s.store.ListJobs(ctx, store.JobFilter{WorkerID: wk.ID, Statuses: activeStatuses})
	if err != nil {
		return nil, err
	}
	for _, j := range active {
		if _, reported := running[j.ID]; reported {
			continue
		}
		switch j.Status {
		case protocol.JobCanceling:
			cancel = append(cancel, j.ID)
		case protocol.JobRunning:
			// Acknowledged, yet the worker says it runs nothing: it lost the
			// job. Only for acks well before this heartbeat, since one composed
			// just before the job arrived may be delivered after the ack.
			margin := 2*s.options().HeartbeatInterval + 5*time.Second
			if j.StartedAt == nil || time.Since(*j.StartedAt) < margin {
				continue
			}
			if err := s.loseAttempt(ctx, j.ID, wk.ID, "the worker's heartbeat no longer lists it"); err != nil {
				return nil, err
			}
		}
	}
	return cancel, nil
}

// jobStatus applies a worker's report to the job, fenced on the attempt.
func (s *Server) jobStatus(w http.ResponseWriter, r *http.Request, ps httprouter.Params, wk store.Worker) error {
	var req protocol.StatusReport
	if err := s.decodeJSON(w, r, &req); err != nil {
		return err
	}
	ctx := r.Context()
	jobID := ps.ByName("job_id")
	switch req.Status {
	case protocol.ReportStarting, protocol.ReportTraining, protocol.ReportRunning,
		protocol.ReportCompleted, protocol.ReportFailed, protocol.ReportCancelled:
	case "":
		return invalid("field \"status\" is required")
	default:
		return invalid("field \"status\" must be one of starting, training, running, completed, failed, cancelled; got %q", req.Status)
	}
	if req.Attempt != nil && *req.Attempt < 1 {
		return invalid("field \"attempt\" must be at least 1")
	}
	j, err := s.store.GetJob(ctx, jobID)
	if errors.Is(err, store.ErrNotFound) {
		return notFound("Job not found: %s", jobID)
	}
	if err != nil {
		return err
	}
	attempt := j.Attempt
	if req.Attempt != nil {
		attempt = *req.Attempt
	}
	if j.WorkerID != wk.ID || attempt != j.Attempt {
		return s.stale(wk, j, attempt, req.Status)
	}
	if j.Status.Terminal() {
		if string(j.Status) == req.Status {
			writeJSON(w, http.StatusOK, map[string]any{"success": true, "status": j.Status})
			return nil
		}
		return s.stale(wk, j, attempt, req.Status)
	}
	nj, changed, err := s.updateJob(ctx, jobID, func(cur store.Job) (*store.JobTransition, error) {
		if cur.WorkerID != wk.ID || cur.Attempt != attempt || cur.Status.Terminal() {
			return nil, s.stale(wk, cur, attempt, req.Status)
		}
		t := reportTransition(cur, req)
		if t != nil {
			t.ExpectWorker = wk.ID
			t.Audit = transitionAudit(workerActor(wk), peerIP(r), cur, t.To, map[string]any{"report": req.Status})
		}
		return t, nil
	})
	if err != nil {
		return err
	}
	if changed && nj.Status.Terminal() {
		s.log.Info("job finished", "job_id", nj.ID, "attempt", nj.Attempt, "status", nj.Status, "worker_id", wk.ID)
		s.afterWorkerFreed(ctx, wk.ID)
	}
	writeJSON(w, http.StatusOK, map[string]any{"success": true, "status": nj.Status})
	return nil
}

func (s *Server) stale(wk store.Worker, j store.Job, attempt int, status string) error {
	s.metrics.StaleRejections.Add(1)
	s.log.Info("stale report refused", "job_id", j.ID, "worker_id", wk.ID, "attempt", attempt,
		"current_attempt", j.Attempt, "current_worker", j.WorkerID, "report", status)
	return staleAttempt("attempt %d of job %s is not the current attempt held by worker %s (job is %s, attempt %d); stop it",
		attempt, j.ID, wk.ID, j.Status, j.Attempt)
}

// reportTransition maps a worker's report onto the job's lifecycle; nil means
// the report changes nothing (a repeated "starting", say).
func reportTransition(j store.Job, req protocol.StatusReport) *store.JobTransition {
	var errMsg *string
	if req.Error != nil && *req.Error != "" {
		errMsg = req.Error
	}
	switch req.Status {
	case protocol.ReportStarting, protocol.ReportTraining, protocol.ReportRunning:
		if j.Status == protocol.JobDispatched {
			return &store.JobTransition{To: protocol.JobRunning, Ack: true, Progress: req.Progress}
		}
		if len(req.Progress) > 0 && j.Status == protocol.JobRunning {
			return &store.JobTransition{To: protocol.JobRunning, Progress: req.Progress}
		}
		return nil
	case protocol.ReportCompleted:
		return &store.JobTransition{To: protocol.JobCompleted, EndAttempt: protocol.OutcomeCompleted, Ack: j.Status == protocol.JobDispatched, Progress: req.Progress}
	case protocol.ReportFailed:
		if errMsg == nil {
			errMsg = ptr("the training process failed")
		}
		return &store.JobTransition{To: protocol.JobFailed, EndAttempt: protocol.OutcomeFailed, Error: errMsg, Progress: req.Progress}
	case protocol.ReportCancelled:
		if j.Status == protocol.JobCanceling {
			return &store.JobTransition{To: protocol.JobCancelled, EndAttempt: protocol.OutcomeCancelled, Error: errMsg}
		}
		// Nobody asked for this cancel: the worker gave the job up (shutdown,
		// abandon, self-fence). Treat it like a lost attempt so nothing is lost.
		why := "the worker stopped it without being asked"
		if errMsg != nil {
			why += ": " + *errMsg
		}
		return lossTransition(j, why)
	}
	return nil
}

// afterWorkerFreed runs when a worker's job ended: a draining ephemeral worker
// is told to shut down; anyone else may get the next job.
func (s *Server) afterWorkerFreed(ctx context.Context, workerID string) {
	wk, err := s.store.GetWorker(ctx, workerID)
	if err != nil {
		return
	}
	if wk.Status == protocol.WorkerDraining && wk.Type == protocol.Ephemeral && wk.CurrentJobID == "" {
		s.sendToWorker(wk.ID, protocol.EventShutdown, protocol.NewShutdownEvent("drained"))
	}
	s.Wake()
}

// jobLogs appends a chunk of the attempt's output, idempotently by offset.
func (s *Server) jobLogs(w http.ResponseWriter, r *http.Request, ps httprouter.Params, wk store.Worker) error {
	attempt, err := strconv.Atoi(r.Header.Get("X-Attempt"))
	if err != nil || attempt < 1 {
		return invalid("header \"X-Attempt\" must be a positive integer")
	}
	offset, err := strconv.ParseInt(r.Header.Get("X-Log-Offset"), 10, 64)
	if err != nil || offset < 0 {
		return invalid("header \"X-Log-Offset\" must be a non-negative integer")
	}
	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.options().MaxBodyBytes))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return errorf(http.StatusRequestEntityTooLarge, protocol.CodeTooLarge, "log chunk exceeds %d bytes", mbe.Limit)
		}
		return errorf(http.StatusBadRequest, protocol.CodeInvalidRequest, "could not read the log chunk: %v", err)
	}
	ctx := r.Context()
	jobID := ps.ByName("job_id")
	j, err := s.store.GetJob(ctx, jobID)
	if errors.Is(err, store.ErrNotFound) {
		return notFound("Job not found: %s", jobID)
	}
	if err != nil {
		return err
	}
	// Logs may trail the terminal report, so a finished attempt still accepts
	// them, but only from its own worker and only for the latest attempt.
	if j.WorkerID != wk.ID || attempt != j.Attempt {
		return s.stale(wk, j, attempt, "logs")
	}
	size, truncated, err := s.store.AppendLog(ctx, jobID, attempt, offset, data, s.options().LogLimitBytes)
	w.Header().Set("X-Log-Size", strconv.FormatInt(size, 10))
	if errors.Is(err, store.ErrConflict) {
		return conflict("log offset %d is beyond the %d bytes stored for attempt %d; resend from %d", offset, size, attempt, size)
	}
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"success": true, "size": size, "truncated": truncated})
	return nil
}

// disconnect marks the worker offline at once; a job it still held is lost.
func (s *Server) disconnect(w http.ResponseWriter, r *http.Request, _ httprouter.Params, wk store.Worker) error {
	var req protocol.DisconnectRequest
	if err := s.decodeJSON(w, r, &req); err != nil {
		return err
	}
	if req.WorkerID != "" && req.WorkerID != wk.ID {
		return errorf(http.StatusBadRequest, protocol.CodeInvalidRequest, "Worker ID mismatch: the token belongs to another worker")
	}
	if err := s.markOffline(r.Context(), wk.ID, workerActor(wk), peerIP(r), "the worker disconnected"); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]bool{"success": true})
	return nil
}

// markOffline closes the worker's stream, sets it offline and ends the
// attempt it held.
func (s *Server) markOffline(ctx context.Context, workerID, actor, ip, why string) error {
	s.closeWorkerStream(workerID, why)
	s.telemetry.forget(workerID)
	wk, err := s.store.UpdateWorker(ctx, workerID, func(cur *store.Worker) (*audit.Record, error) {
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
	s.log.Info("worker offline", "worker_id", workerID, "reason", why)
	active, _, err := s.store.ListJobs(ctx, store.JobFilter{WorkerID: wk.ID, Statuses: activeStatuses})
	if err != nil {
		return err
	}
	for _, j := range active {
		if err := s.loseAttempt(ctx, j.ID, wk.ID, fmt.Sprintf("worker %s (%s) went offline: %s", wk.ID, wk.Name, why)); err != nil {
			return err
		}
	}
	return nil
}

// queueCheck tells an ephemeral worker whether a queued job could run on it.
func (s *Server) queueCheck(w http.ResponseWriter, r *http.Request, _ httprouter.Params, wk store.Worker) error {
	if id := r.URL.Query().Get("worker_id"); id != "" && id != wk.ID {
		return errorf(http.StatusBadRequest, protocol.CodeInvalidRequest, "Worker ID mismatch: the token belongs to another worker")
	}
	jobs, _, err := s.store.ListJobs(r.Context(), store.JobFilter{Statuses: []protocol.JobStatus{protocol.JobQueued}, Limit: store.ClaimScanLimit})
	if err != nil {
		return err
	}
	has := false
	for _, j := range jobs {
		if matches(j, wk) {
			has = true
			break
		}
	}
	writeJSON(w, http.StatusOK, protocol.QueueCheckResponse{HasJobs: has})
	return nil
}
