package orchestrator

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/julienschmidt/httprouter"

	"github.com/simpletuner/simpletuner-orchestration/internal/audit"
	"github.com/simpletuner/simpletuner-orchestration/internal/auth"
	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
	"github.com/simpletuner/simpletuner-orchestration/internal/store"
)

type submitRequest struct {
	ConfigName     *string           `json:"config_name"`
	Config         json.RawMessage   `json:"config"`
	Dataloader     json.RawMessage   `json:"dataloader"`
	HFToken        string            `json:"hf_token"`
	Target         protocol.Target   `json:"target"`
	WorkerLabels   map[string]string `json:"worker_labels"`
	GPUCount       *int              `json:"gpu_count"`
	MinVRAMGB      *float64          `json:"min_vram_gb"`
	Priority       *int              `json:"priority"`
	MaxRetries     *int              `json:"max_retries"`
	TimeoutSeconds *int              `json:"timeout_seconds"`
}

// Default priority of a job: upstream's "normal".
const defaultPriority = 10

func (s *Server) submit(w http.ResponseWriter, r *http.Request, _ httprouter.Params, p auth.Principal) error {
	var req submitRequest
	body, err := s.decodeJSONBody(w, r, &req)
	if err != nil {
		return err
	}
	opt := s.options()
	j := store.Job{
		ID: protocol.NewJobID(), Target: req.Target, WorkerLabels: req.WorkerLabels, HFToken: req.HFToken,
		Priority: defaultPriority, MaxRetries: opt.MaxRetries, Status: protocol.JobQueued, SubmittedBy: p.Actor(),
	}
	if j.Target == "" {
		j.Target = protocol.TargetAuto
	}
	if !j.Target.Valid() {
		return invalid("field \"target\" must be worker, local or auto; got %q", req.Target)
	}
	// Checked before anything else is done with them: the scheduler matches
	// them against every idle worker.
	if err := protocol.CheckLabelPatterns(req.WorkerLabels); err != nil {
		return invalid("field \"worker_labels\": %v", err)
	}
	if err := intField("priority", req.Priority, 0, 50, &j.Priority); err != nil {
		return err
	}
	if err := intField("max_retries", req.MaxRetries, 0, 100, &j.MaxRetries); err != nil {
		return err
	}
	if err := intField("timeout_seconds", req.TimeoutSeconds, 0, 365*24*3600, &j.TimeoutSeconds); err != nil {
		return err
	}
	if req.MinVRAMGB != nil {
		if *req.MinVRAMGB < 0 {
			return invalid("field \"min_vram_gb\" must not be negative")
		}
		j.MinVRAMGB = *req.MinVRAMGB
	}
	if len(req.Dataloader) > 0 && string(req.Dataloader) != "null" {
		j.Dataloader = req.Dataloader
	}
	switch {
	case req.ConfigName != nil && len(req.Config) > 0:
		return invalid("give either \"config_name\" or \"config\", not both")
	case req.ConfigName != nil:
		name, cfg, err := resolveConfig(opt.ConfigsDir, *req.ConfigName)
		if err != nil {
			return err
		}
		j.ConfigName, j.Config = name, cfg
	case len(req.Config) > 0:
		cfg, err := normalizeConfig(req.Config)
		if err != nil {
			return invalid("field \"config\": %v", err)
		}
		j.Config = cfg
	default:
		return invalid("field \"config_name\" (or an inline \"config\" object) is required")
	}
	if j.GPUCount, j.WholeWorker, err = gpuRequest(req.GPUCount, j.Config); err != nil {
		return err
	}
	now := time.Now().UTC()
	j.CreatedAt, j.UpdatedAt = now, now
	rec := audit.New(p.Actor(), peerIP(r), "job.submit", "job", j.ID, audit.Success,
		map[string]any{"config_name": j.ConfigName, "target": j.Target, "priority": j.Priority, "worker_labels": j.WorkerLabels,
			"gpus": protocol.GPUAllocation(j.GPUCount, j.WholeWorker)})
	j, err = s.store.InsertJob(r.Context(), j, &rec)
	if err != nil {
		return err
	}
	s.log.Info("job submitted", "job_id", j.ID, "config_name", j.ConfigName, "target", j.Target,
		"gpus", protocol.GPUAllocation(j.GPUCount, j.WholeWorker), "by", p.Actor())
	s.Wake()
	s.publish(store.Notification{Kind: store.NotifyWake})
	pos, err := s.queuePosition(r, j)
	if err != nil {
		return err
	}
	reply := map[string]any{"success": true, "job_id": j.ID, "status": j.Status, "queue_position": pos,
		"gpu_count": gpuCountView(j), "whole_worker": j.WholeWorker, "gpu_allocation": protocol.GPUAllocation(j.GPUCount, j.WholeWorker)}
	// Accepted all the same: a larger worker may be added later.
	if largest := int(s.largestWorker.Load()); j.GPUCount > largest {
		reply["warning"] = fmt.Sprintf("no worker can run this job yet: it asks for %d GPUs; the largest worker has %d", j.GPUCount, largest)
	}
	if warnings := unknownFieldWarnings(body, req); len(warnings) > 0 {
		reply["warnings"] = warnings
	}
	writeJSON(w, http.StatusCreated, reply)
	return nil
}

func intField(name string, v *int, lo, hi int, dst *int) error {
	if v == nil {
		return nil
	}
	if *v < lo || *v > hi {
		return invalid("field %q must be from %d to %d; got %d", name, lo, hi, *v)
	}
	*dst = *v
	return nil
}

// queuePosition counts the queued jobs that will be offered before j.
func (s *Server) queuePosition(r *http.Request, j store.Job) (int, error) {
	return s.store.QueuePosition(r.Context(), j.Priority, j.Seq)
}

// maxConfigName bounds config_name: well under every file system's name limit
// (255 bytes), with room for ".json".
const maxConfigName = 200

// resolveConfig finds <dir>/<name>/config.json, else <dir>/<name>.json. Its
// answers never show dir: a client has no business learning the layout of
// the orchestrator's disk.
func resolveConfig(dir, raw string) (string, json.RawMessage, error) {
	name := strings.TrimSpace(raw)
	if strings.HasSuffix(strings.ToLower(name), ".json") {
		name = name[:len(name)-5]
	}
	if name == "" {
		return "", nil, invalid("field \"config_name\" must not be empty")
	}
	if len(name) > maxConfigName {
		return "", nil, invalid("field \"config_name\" is %d bytes long; at most %d", len(name), maxConfigName)
	}
	if strings.ContainsAny(name, `/\`) || strings.Contains(name, "..") || strings.ContainsRune(name, 0) {
		return "", nil, invalid("field \"config_name\" must be a plain name without path separators or \"..\"; got %q", raw)
	}
	for _, rel := range []string{filepath.Join(name, "config.json"), name + ".json"} {
		data, err := os.ReadFile(filepath.Join(dir, rel))
		switch {
		case errors.Is(err, os.ErrNotExist), errors.Is(err, syscall.ENOTDIR):
			continue // <name> is a plain file: only <name>.json can be it
		case errors.Is(err, syscall.ENAMETOOLONG), errors.Is(err, syscall.EILSEQ), errors.Is(err, syscall.EINVAL):
			return "", nil, invalid("field \"config_name\": %q is not a usable file name here", name)
		case err != nil:
			return "", nil, fmt.Errorf("reading config %s: %w", filepath.Join(dir, rel), err)
		}
		cfg, err := normalizeConfig(data)
		if err != nil {
			return "", nil, invalid("config %q (%s in the configs directory) is not usable: %v", name, rel, err)
		}
		return name, cfg, nil
	}
	return "", nil, notFound("Config '%s' not found (looked for %s/config.json and %s.json in the configs directory)", name, name, name)
}

// normalizeConfig unwraps upstream's {"_metadata", "config"} envelope and
// mirrors data_backend_config to its --flag spelling, as upstream does.
func normalizeConfig(data []byte) (json.RawMessage, error) {
	var m map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&m); err != nil || m == nil {
		return nil, errors.New("it must be a JSON object")
	}
	if _, ok := m["_metadata"]; ok {
		if inner, ok := m["config"]; ok {
			m = nil
			if err := json.Unmarshal(inner, &m); err != nil || m == nil {
				return nil, errors.New("its \"config\" member must be a JSON object")
			}
		} else {
			delete(m, "_metadata")
		}
	}
	if v, ok := m["data_backend_config"]; ok {
		if _, has := m["--data_backend_config"]; !has {
			m["--data_backend_config"] = v
		}
	} else if v, ok := m["--data_backend_config"]; ok {
		m["data_backend_config"] = v
	}
	out, err := json.Marshal(m)
	return out, err
}

func (s *Server) loadJob(r *http.Request, id string) (store.Job, error) {
	j, err := s.store.GetJob(r.Context(), id)
	if errors.Is(err, store.ErrNotFound) {
		return j, notFound("Job not found: %s", id)
	}
	return j, err
}

func (s *Server) getJob(w http.ResponseWriter, r *http.Request, ps httprouter.Params, _ auth.Principal) error {
	j, err := s.loadJob(r, ps.ByName("job_id"))
	if err != nil {
		return err
	}
	attempts, err := s.store.ListAttempts(r.Context(), j.ID)
	if err != nil {
		return err
	}
	v := newJobView(j)
	v.Config = j.Config
	v.Attempts = []attemptView{}
	for _, a := range attempts {
		v.Attempts = append(v.Attempts, newAttemptView(a))
	}
	if j.Status == protocol.JobQueued {
		if v.WaitingReason, v.WaitingDetail, err = s.waiting(r.Context(), j); err != nil {
			return err
		}
	}
	writeJSON(w, http.StatusOK, v)
	return nil
}

func (s *Server) cancelJob(w http.ResponseWriter, r *http.Request, ps httprouter.Params, p auth.Principal) error {
	id := ps.ByName("job_id")
	nj, err := s.requestCancel(r.Context(), id, p.Actor(), peerIP(r))
	if errors.Is(err, store.ErrNotFound) {
		return notFound("Job not found: %s", id)
	}
	if err != nil {
		return err
	}
	s.log.Info("job cancel requested", "job_id", nj.ID, "status", nj.Status, "by", p.Actor())
	writeJSON(w, http.StatusOK, map[string]any{"success": true, "job_id": nj.ID, "status": nj.Status})
	return nil
}

func (s *Server) stats(w http.ResponseWriter, r *http.Request, _ httprouter.Params, _ auth.Principal) error {
	// ?history=0 leaves the all-time counts of finished jobs out of by_status
	// (a live view does not need them). Either way the counts come from the
	// per-status counters, not from the history.
	var counts map[protocol.JobStatus]int
	var err error
	switch h := r.URL.Query().Get("history"); h {
	case "", "1", "true":
		counts, err = s.store.CountJobs(r.Context())
	case "0", "false":
		counts, err = s.store.CountJobsIn(r.Context(), append([]protocol.JobStatus{protocol.JobQueued}, protocol.ActiveJobStatuses()...))
	default:
		return invalid("query parameter \"history\" must be 0 or 1; got %q", h)
	}
	if err != nil {
		return err
	}
	byWorker, gpus, err := s.fleetSummary(r.Context())
	if err != nil {
		return err
	}
	recent, err := s.recentEndCounts(r.Context())
	if err != nil {
		return err
	}
	total := 0
	for _, n := range byWorker {
		total += n
	}
	byStatus := map[string]int{}
	for k, v := range counts {
		byStatus[string(k)] = v
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"queue_depth": counts[protocol.JobQueued],
		"running":     counts[protocol.JobDispatched] + counts[protocol.JobRunning] + counts[protocol.JobCanceling],
		"by_status":   byStatus,
		"workers": map[string]int{
			"total": total, "idle": byWorker[protocol.WorkerIdle], "partial": byWorker[protocol.WorkerPartial], "busy": byWorker[protocol.WorkerBusy],
			"draining": byWorker[protocol.WorkerDraining], "offline": byWorker[protocol.WorkerOffline],
			"connecting": byWorker[protocol.WorkerConnecting], "disconnected": byWorker[protocol.WorkerDisconnected],
		},
		"gpus": gpus,
		"last_24h": map[string]int{
			"completed": recent[protocol.JobCompleted], "failed": recent[protocol.JobFailed], "cancelled": recent[protocol.JobCancelled],
		},
	})
	return nil
}
