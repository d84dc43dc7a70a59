package rpc

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/julienschmidt/httprouter"

	"github.com/simpletuner/simpletuner-orchestration/internal/auth"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator/authn"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator/hub"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator/labels"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator/logfeed"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator/transitions"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator/web"
	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
	"github.com/simpletuner/simpletuner-orchestration/internal/store"
)

// The worker protocol's HTTP handlers: each decodes, checks that the token's
// worker is the one named, calls the engine and encodes the reply.

// errWorkerMismatch answers a request that names another worker than the token's.
var errWorkerMismatch = web.Errorf(http.StatusBadRequest, protocol.CodeInvalidRequest, "Worker ID mismatch: the token belongs to another worker")

// sameWorker checks a worker id named in a request against the token's.
func sameWorker(named string, wk store.Worker) error {
	if named != "" && named != wk.ID {
		return errWorkerMismatch
	}
	return nil
}

func (s *Protocol) handleRegister(w http.ResponseWriter, r *http.Request, _ httprouter.Params, wk store.Worker) error {
	var req protocol.RegisterRequest
	if err := s.decodeJSON(w, r, &req); err != nil {
		return err
	}
	req.Name = strings.TrimSpace(req.Name)
	if req.Name == "" {
		return web.Invalid("field \"name\" is required")
	}
	if err := labels.Valid("labels", req.Labels); err != nil {
		return err
	}
	// What a worker reports is shown in admins' terminals and pages.
	provider := ""
	if req.Provider != nil {
		provider = *req.Provider
	}
	for _, f := range [][2]string{{"name", req.Name}, {"version", req.Version}, {"provider", provider}} {
		if err := web.Printable(f[0], f[1]); err != nil {
			return err
		}
	}
	if err := checkGPUConditions(req.GPUConditions); err != nil {
		return err
	}
	if len(req.GPUInfo) > 0 && string(req.GPUInfo) != "null" {
		var obj map[string]any
		if json.Unmarshal(req.GPUInfo, &obj) != nil {
			return web.Invalid("field \"gpu_info\" must be an object")
		}
	} else {
		req.GPUInfo = json.RawMessage(`{}`)
	}
	local := authn.ViaAdminSocket(r)
	resp, err := s.register(r.Context(), wk, registration{req: req, local: local, ip: authn.PeerIP(r), session: sessionOf(r)})
	if err != nil {
		return err
	}
	web.WriteJSON(w, http.StatusOK, resp)
	return nil
}

// handleStream holds the worker's SSE connection open and writes its events.
func (s *Protocol) handleStream(w http.ResponseWriter, r *http.Request, _ httprouter.Params, wk store.Worker) error {
	id := r.URL.Query().Get("worker_id")
	if id == "" {
		return web.Invalid("query parameter \"worker_id\" is required")
	}
	if err := sameWorker(id, wk); err != nil {
		return err
	}
	rc := http.NewResponseController(w)
	// SSE lives longer than any server-wide write timeout; each write gets its own deadline below.
	_ = rc.SetWriteDeadline(time.Time{})

	ctx := r.Context()
	if err := s.streamOpened(ctx, wk.ID); err != nil {
		return err
	}
	st := s.Hub.Attach(wk.ID, wk.TokenHash)
	defer func() {
		if s.Hub.Detach(st) {
			s.streamClosed(wk.ID)
		}
		s.Log.Debug("worker stream closed", "worker_id", wk.ID, "reason", st.Reason())
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
	s.Log.Info("worker stream opened", "worker_id", wk.ID)
	s.Wake()

	write := func(frame []byte) bool {
		_ = rc.SetWriteDeadline(time.Now().Add(s.Options().StreamWriteTimeout))
		if _, err := w.Write(frame); err != nil {
			return false
		}
		return rc.Flush() == nil
	}
	// A job_submit goes out only while the stream's token is still the
	// worker's (see dispatchAllowed).
	send := func(out hub.Outgoing) bool {
		if out.JobID != "" && !s.dispatchAllowed(ctx, st, out.JobID) {
			return false
		}
		return write(out.Frame)
	}
	ping := s.Options().PingInterval
	timer := time.NewTimer(ping)
	defer timer.Stop()
	pingFrame := []byte("event: ping\ndata: {\"type\":\"ping\"}\n\n")
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-st.Done():
			// Write what was queued before the close: a job_submit the
			// scheduler handed over just before a shutdown must still reach
			// the worker, or the attempt would be withdrawn at its return.
			for {
				select {
				case out := <-st.Events():
					if !send(out) {
						return nil
					}
				default:
					return nil
				}
			}
		case out := <-st.Events():
			if !send(out) {
				return nil
			}
		case <-timer.C:
			if !write(pingFrame) {
				return nil
			}
		}
		timer.Reset(ping)
	}
}

// dispatchAllowed checks, just before a job_submit (and the secrets it
// carries) is written, that the token that opened the stream is still the
// worker's: a rotation whose notification this instance missed must not
// leave the old token's stream receiving jobs. When it is not, or the store
// cannot say, the attempt is withdrawn and the stream closed.
func (s *Protocol) dispatchAllowed(ctx context.Context, st *hub.Stream, jobID string) bool {
	cur, err := s.Store.GetWorkerState(ctx, st.WorkerID)
	if err == nil && auth.Equal(cur.TokenHash, st.TokenHash) {
		return true
	}
	why := "the token that opened the worker's stream is no longer its token"
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		why = "the worker's token could not be checked before dispatch"
	}
	s.Log.Warn("job not sent: "+why+"; closing the stream", "job_id", jobID, "worker_id", st.WorkerID, "err", err)
	bg, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := s.Moves.LoseAttempt(bg, jobID, st.WorkerID, why); err != nil {
		s.Log.Warn("could not withdraw the attempt; the acknowledgement timeout will", "job_id", jobID, "err", err)
	}
	st.Close("token no longer valid") // its handler detaches it and clears the store's marker
	return false
}

// CheckStreamTokens closes the streams here whose worker is gone or whose
// token changed since they opened: the notification of a rotation may never
// have reached this instance.
func (s *Protocol) CheckStreamTokens(ctx context.Context) {
	streams := s.Hub.Streams()
	if len(streams) == 0 {
		return
	}
	current := make(map[string]string, len(streams))
	if err := store.EachWorker(ctx, s.Store, func(w store.Worker) { current[w.ID] = w.TokenHash }); err != nil {
		s.Log.Debug("stream token check: cannot list workers", "err", err)
		return
	}
	for _, st := range streams {
		if hash, ok := current[st.WorkerID]; !ok || !auth.Equal(hash, st.TokenHash) {
			s.Log.Info("closing a worker stream: its token was rotated or the worker deleted", "worker_id", st.WorkerID)
			st.Close("token no longer valid") // its handler detaches it and clears the store's marker
		}
	}
}

// RunStreamCheck runs checkStreamTokens every RecheckInterval.
func (s *Protocol) RunStreamCheck(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(s.Options().RecheckInterval):
			s.CheckStreamTokens(ctx)
		}
	}
}

func (s *Protocol) handleHeartbeat(w http.ResponseWriter, r *http.Request, _ httprouter.Params, wk store.Worker) error {
	received := time.Now()
	var req protocol.HeartbeatRequest
	if err := s.decodeJSON(w, r, &req); err != nil {
		return err
	}
	if req.WorkerID == "" {
		return web.Invalid("field \"worker_id\" is required")
	}
	if err := sameWorker(req.WorkerID, wk); err != nil {
		return err
	}
	// What a worker says of its GPUs is kept in memory and shown to admins:
	// a report past the limits is refused before anything is noted.
	if err := protocol.CheckGPUTelemetry(req.GPUs); err != nil {
		return web.Invalid("%v", err)
	}
	if err := checkGPUConditions(req.GPUConditions); err != nil {
		return err
	}
	if req.SentAt != "" {
		sent, err := time.Parse(time.RFC3339Nano, req.SentAt)
		if err != nil {
			return web.Invalid("field \"sent_at\" must be an RFC 3339 time, got %q", req.SentAt)
		}
		s.Heard.NoteClock(wk.ID, sent, received)
	}
	resp, err := s.heartbeat(r.Context(), wk, req)
	if err != nil {
		return err
	}
	web.WriteJSON(w, http.StatusOK, resp)
	return nil
}

// handleJobStatus applies a worker's report to the job, fenced on the attempt.
// wk is what store.GetReportingWorkerByTokenHash reads of the worker.
func (s *Protocol) handleJobStatus(w http.ResponseWriter, r *http.Request, ps httprouter.Params, wk store.Worker) error {
	var req protocol.StatusReport
	if err := s.decodeJSON(w, r, &req); err != nil {
		return err
	}
	switch req.Status {
	case protocol.ReportStarting, protocol.ReportTraining, protocol.ReportRunning,
		protocol.ReportCompleted, protocol.ReportFailed, protocol.ReportCancelled:
	case "":
		return web.Invalid("field \"status\" is required")
	default:
		return web.Invalid("field \"status\" must be one of starting, training, running, completed, failed, cancelled; got %q", req.Status)
	}
	attempt := 0
	if req.Attempt != nil {
		if *req.Attempt < 1 {
			return web.Invalid("field \"attempt\" must be at least 1")
		}
		attempt = *req.Attempt
	}
	// A GPU the job left dirty is held back before the report frees it.
	wk, err := s.noteGPUConditions(r.Context(), wk, req.GPUConditions, authn.PeerIP(r))
	if err != nil {
		return err
	}
	jobID := ps.ByName("job_id")
	j, _, err := s.Moves.ApplyReport(r.Context(), wk, jobID, attempt, req, authn.PeerIP(r))
	if errors.Is(err, store.ErrNotFound) {
		return web.NotFound("Job not found: %s", jobID)
	}
	if err != nil {
		return err
	}
	web.WriteJSON(w, http.StatusOK, map[string]any{"success": true, "status": j.Status})
	return nil
}

// handleJobLogs appends a chunk of the attempt's output, idempotently by offset.
// wk is what store.GetReportingWorkerByTokenHash reads of the worker.
func (s *Protocol) handleJobLogs(w http.ResponseWriter, r *http.Request, ps httprouter.Params, wk store.Worker) error {
	attempt, err := strconv.Atoi(r.Header.Get("X-Attempt"))
	if err != nil || attempt < 1 {
		return web.Invalid("header \"X-Attempt\" must be a positive integer")
	}
	offset, err := strconv.ParseInt(r.Header.Get("X-Log-Offset"), 10, 64)
	if err != nil || offset < 0 {
		return web.Invalid("header \"X-Log-Offset\" must be a non-negative integer")
	}
	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.Options().MaxBodyBytes))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return web.Errorf(http.StatusRequestEntityTooLarge, protocol.CodeTooLarge, "log chunk exceeds %d bytes", mbe.Limit)
		}
		return web.Errorf(http.StatusBadRequest, protocol.CodeInvalidRequest, "could not read the log chunk: %v", err)
	}
	ctx := r.Context()
	jobID := ps.ByName("job_id")
	j, err := s.Store.GetJob(ctx, jobID)
	if errors.Is(err, store.ErrNotFound) {
		return web.NotFound("Job not found: %s", jobID)
	}
	if err != nil {
		return err
	}
	// Logs may trail the terminal report, so a finished attempt still accepts
	// them, but only from its own worker and only for the latest attempt.
	if j.WorkerID != wk.ID || attempt != j.Attempt {
		return s.Moves.Stale(wk, j, attempt, "logs")
	}
	size, truncated, err := s.Store.AppendLog(ctx, jobID, attempt, offset, data, s.Options().LogLimitBytes)
	w.Header().Set("X-Log-Size", strconv.FormatInt(size, 10))
	if errors.Is(err, store.ErrConflict) {
		return web.Conflict("log offset %d is beyond the %d bytes stored for attempt %d; resend from %d", offset, size, attempt, size)
	}
	if err != nil {
		return err
	}
	switch end := offset + int64(len(data)); {
	case truncated:
		s.LogFeed.Changed(jobID)
	case end == size && len(data) > 0:
		s.LogFeed.Stored(jobID, logfeed.Piece{Attempt: attempt, Offset: offset, Data: data})
	}
	web.WriteJSON(w, http.StatusOK, map[string]any{"success": true, "size": size, "truncated": truncated})
	return nil
}

// handleDisconnect marks the worker offline at once; a job it still held is lost.
func (s *Protocol) handleDisconnect(w http.ResponseWriter, r *http.Request, _ httprouter.Params, wk store.Worker) error {
	var req protocol.DisconnectRequest
	if err := s.decodeJSON(w, r, &req); err != nil {
		return err
	}
	if err := sameWorker(req.WorkerID, wk); err != nil {
		return err
	}
	if err := s.markOffline(r.Context(), wk.ID, transitions.WorkerActor(wk), authn.PeerIP(r), "the worker disconnected"); err != nil {
		return err
	}
	web.WriteJSON(w, http.StatusOK, map[string]bool{"success": true})
	return nil
}

// handleQueueCheck tells an ephemeral worker whether a queued job could run on it.
func (s *Protocol) handleQueueCheck(w http.ResponseWriter, r *http.Request, _ httprouter.Params, wk store.Worker) error {
	if err := sameWorker(r.URL.Query().Get("worker_id"), wk); err != nil {
		return err
	}
	has, err := s.hasJobFor(r.Context(), wk)
	if err != nil {
		return err
	}
	web.WriteJSON(w, http.StatusOK, protocol.QueueCheckResponse{HasJobs: has})
	return nil
}
