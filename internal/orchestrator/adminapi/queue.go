package adminapi

import (
	"bytes"
	"context"
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

	"github.com/simpletuner/simpletuner-orchestration/internal/api"
	"github.com/simpletuner/simpletuner-orchestration/internal/audit"
	"github.com/simpletuner/simpletuner-orchestration/internal/auth"
	"github.com/simpletuner/simpletuner-orchestration/internal/config"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator/web"
	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
	"github.com/simpletuner/simpletuner-orchestration/internal/store"
)

// Default priority of a job: upstream's "normal".
const defaultPriority = config.DefaultPriority

// submitRequest is POST /api/queue/submit's body, and the body as sent:
// its unknown fields are named in the reply's warnings.
type submitRequest struct {
	api.Submit
	body []byte
}

func (a *API) parseSubmit(w http.ResponseWriter, r *http.Request, _ httprouter.Params) (req submitRequest, err error) {
	req.body, err = web.ReadJSON(w, r, a.options().MaxBodyBytes, &req.Submit)
	return req, err
}

// submitHTTP is Submit with the warnings about the fields of the body it
// did not know.
func (a *API) submitHTTP(ctx context.Context, req submitRequest) (api.Submitted, error) {
	reply, err := a.Submit(ctx, req.Submit)
	if err == nil {
		reply.Warnings = unknownFieldWarnings(req.body, req.Submit)
	}
	return reply, err
}

// Submit queues a job.
func (a *API) Submit(ctx context.Context, req api.Submit) (api.Submitted, error) {
	c, err := authorize(ctx, auth.ScopeQueueSubmit)
	if err != nil {
		return api.Submitted{}, err
	}
	opt := a.options()
	j := store.Job{
		ID: protocol.NewJobID(), Target: req.Target, WorkerLabels: req.WorkerLabels, HFToken: req.HFToken,
		MaxRetries: opt.MaxRetries, Status: protocol.JobQueued, SubmittedBy: c.Actor(),
	}
	if j.Target == "" {
		j.Target = protocol.TargetAuto
	}
	if !j.Target.Valid() {
		return api.Submitted{}, web.Invalid("field \"target\" must be worker, local or auto; got %q", req.Target)
	}
	// Checked before anything else is done with them: the scheduler matches
	// them against every idle worker.
	if err := protocol.CheckLabelPatterns(req.WorkerLabels); err != nil {
		return api.Submitted{}, web.Invalid("field \"worker_labels\": %v", err)
	}
	if err := intField("priority", req.Priority, config.LowestPriority, config.HighestPriority, &j.Priority); err != nil {
		return api.Submitted{}, err
	}
	if err := intField("max_retries", req.MaxRetries, 0, 100, &j.MaxRetries); err != nil {
		return api.Submitted{}, err
	}
	if err := intField("timeout_seconds", req.TimeoutSeconds, 0, 365*24*3600, &j.TimeoutSeconds); err != nil {
		return api.Submitted{}, err
	}
	if req.MinVRAMGB != nil {
		if *req.MinVRAMGB < 0 {
			return api.Submitted{}, web.Invalid("field \"min_vram_gb\" must not be negative")
		}
		j.MinVRAMGB = *req.MinVRAMGB
	}
	j.NoCheckpoints = req.Checkpoints != nil && !*req.Checkpoints
	if len(req.Dataloader) > 0 && string(req.Dataloader) != "null" {
		j.Dataloader = req.Dataloader
	}
	switch {
	case req.ConfigName != nil && len(req.Config) > 0:
		return api.Submitted{}, web.Invalid("give either \"config_name\" or \"config\", not both")
	case req.ConfigName != nil:
		name, cfg, err := resolveConfig(opt.ConfigsDir, *req.ConfigName)
		if err != nil {
			return api.Submitted{}, err
		}
		j.ConfigName, j.Config = name, cfg
	case len(req.Config) > 0:
		cfg, err := normalizeConfig(req.Config)
		if err != nil {
			return api.Submitted{}, web.Invalid("field \"config\": %v", err)
		}
		j.Config = cfg
	default:
		return api.Submitted{}, web.Invalid("field \"config_name\" (or an inline \"config\" object) is required")
	}
	if j.GPUCount, j.WholeWorker, err = gpuRequest(req.GPUCount, j.Config); err != nil {
		return api.Submitted{}, err
	}
	team, err := a.submitTeam(c, j)
	if err != nil {
		return api.Submitted{}, err
	}
	if err := jobPriority(c, team, req.Priority, &j); err != nil {
		return api.Submitted{}, err
	}
	j.Team = team.Name
	if err := a.readDependencies(ctx, c, req, &j); err != nil {
		return api.Submitted{}, err
	}
	now := time.Now().UTC()
	j.CreatedAt, j.UpdatedAt = now, now
	details := map[string]any{"config_name": j.ConfigName, "target": j.Target, "priority": j.Priority, "worker_labels": j.WorkerLabels,
		"gpus": protocol.GPUAllocation(j.GPUCount, j.WholeWorker), "team": j.Team}
	if len(j.DependsOn) > 0 {
		deps := make([]api.Dependency, len(j.DependsOn))
		for i, d := range j.DependsOn {
			deps[i] = api.Dependency{JobID: d.JobID, When: d.When}
		}
		details["depends_on"] = deps
	}
	held, err := a.approvalFor(ctx, j)
	if err != nil {
		return api.Submitted{}, err
	}
	if held != nil {
		details["approval_rule"] = held.RuleName
		return a.submitHeld(ctx, c, j, *held, audit.New(c.Actor(), c.IP, "job.submit", "job", j.ID, audit.Success, details))
	}
	rec := audit.New(c.Actor(), c.IP, "job.submit", "job", j.ID, audit.Success, details)
	// The insert returns a zero job when it refuses: the message names the
	// team of the job as submitted.
	inserted, err := a.store.InsertTeamJob(ctx, j, team.MaxQueued, &rec)
	if errors.Is(err, store.ErrQueueFull) {
		return api.Submitted{}, web.Errorf(http.StatusTooManyRequests, protocol.CodeRateLimited,
			"team %q already has %d jobs queued or waiting, its max_queued; submit again when some have started", j.Team, team.MaxQueued)
	}
	if err != nil {
		return api.Submitted{}, dependencyInsertError(err)
	}
	j = inserted
	a.log.Info("job submitted", "job_id", j.ID, "status", j.Status, "config_name", j.ConfigName, "target", j.Target,
		"gpus", protocol.GPUAllocation(j.GPUCount, j.WholeWorker), "team", j.Team, "by", c.Actor())
	reply := api.Submitted{Success: true, JobID: j.ID, Status: string(j.Status),
		GPUCount: gpuCountView(j), WholeWorker: j.WholeWorker, GPUAllocation: protocol.GPUAllocation(j.GPUCount, j.WholeWorker)}
	if j.Status == protocol.JobQueued { // a waiting job is not in the queue yet
		a.events.WakeSchedulers()
		if reply.QueuePosition, err = a.store.QueuePosition(ctx, j.Priority, j.Seq); err != nil {
			return api.Submitted{}, err
		}
	}
	// Accepted all the same: a larger worker may be added later.
	if largest := a.workers.LargestWorker(); j.GPUCount > largest {
		reply.Warning = fmt.Sprintf("no worker can run this job yet: it asks for %d GPUs; the largest worker has %d", j.GPUCount, largest)
	}
	return reply, nil
}

func intField(name string, v *int, lo, hi int, dst *int) error {
	if v == nil {
		return nil
	}
	if *v < lo || *v > hi {
		return web.Invalid("field %q must be from %d to %d; got %d", name, lo, hi, *v)
	}
	*dst = *v
	return nil
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
		return "", nil, web.Invalid("field \"config_name\" must not be empty")
	}
	if len(name) > maxConfigName {
		return "", nil, web.Invalid("field \"config_name\" is %d bytes long; at most %d", len(name), maxConfigName)
	}
	if strings.ContainsAny(name, `/\`) || strings.Contains(name, "..") || strings.ContainsRune(name, 0) {
		return "", nil, web.Invalid("field \"config_name\" must be a plain name without path separators or \"..\"; got %q", raw)
	}
	for _, rel := range []string{filepath.Join(name, "config.json"), name + ".json"} {
		data, err := os.ReadFile(filepath.Join(dir, rel))
		switch {
		case errors.Is(err, os.ErrNotExist), errors.Is(err, syscall.ENOTDIR):
			continue // <name> is a plain file: only <name>.json can be it
		case errors.Is(err, syscall.ENAMETOOLONG), errors.Is(err, syscall.EILSEQ), errors.Is(err, syscall.EINVAL):
			return "", nil, web.Invalid("field \"config_name\": %q is not a usable file name here", name)
		case err != nil:
			return "", nil, fmt.Errorf("reading config %s: %w", filepath.Join(dir, rel), err)
		}
		cfg, err := normalizeConfig(data)
		if err != nil {
			return "", nil, web.Invalid("config %q (%s in the configs directory) is not usable: %v", name, rel, err)
		}
		return name, cfg, nil
	}
	return "", nil, web.NotFound("Config '%s' not found (looked for %s/config.json and %s.json in the configs directory)", name, name, name)
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

// Job is one job with its attempts, and why it waits when it is queued.
func (a *API) Job(ctx context.Context, ref api.JobRef) (api.Job, error) {
	c, err := authorize(ctx, auth.ScopeQueueView)
	if err != nil {
		return api.Job{}, err
	}
	j, err := a.jobFor(ctx, c, ref.ID, auth.ScopeQueueView)
	if err != nil {
		return api.Job{}, err
	}
	attempts, err := a.store.ListAttempts(ctx, j.ID)
	if err != nil {
		return api.Job{}, err
	}
	v := newJobView(j)
	v.Config = j.Config
	v.Attempts = []api.Attempt{}
	for _, at := range attempts {
		v.Attempts = append(v.Attempts, newAttemptView(at))
	}
	deps, _, err := a.dependencyViews(ctx, &v)
	if err != nil {
		return api.Job{}, err
	}
	switch j.Status {
	case protocol.JobQueued:
		if v.WaitingReason, v.WaitingDetail, err = a.waiting(ctx, j); err != nil {
			return api.Job{}, err
		}
	case protocol.JobWaiting:
		v.WaitingReason, v.WaitingDetail = dependencyWait(deps)
	}
	if v.Checkpoint, v.CheckpointsKept, err = a.uploads.LatestCheckpoint(ctx, j); err != nil {
		return api.Job{}, err
	}
	a.redactView(ctx, c, &v)
	return v, nil
}

// CancelJob cancels a job: a queued one at once, an active one through its
// worker.
func (a *API) CancelJob(ctx context.Context, ref api.JobRef) (api.JobAction, error) {
	c, err := authorize(ctx, auth.ScopeQueueCancel)
	if err != nil {
		return api.JobAction{}, err
	}
	if _, err := a.jobFor(ctx, c, ref.ID, auth.ScopeQueueCancel); err != nil {
		return api.JobAction{}, err
	}
	nj, err := a.jobs.RequestCancel(ctx, ref.ID, c.Actor(), c.IP)
	if errors.Is(err, store.ErrNotFound) {
		return api.JobAction{}, jobNotFound(ref.ID)
	}
	if err != nil {
		return api.JobAction{}, err
	}
	a.log.Info("job cancel requested", "job_id", nj.ID, "status", nj.Status, "by", c.Actor())
	return api.JobAction{Success: true, JobID: nj.ID, Status: string(nj.Status)}, nil
}

// statsQuery reads ?history=: 0 leaves the all-time counts of finished jobs
// out of by_status (a live view does not need them).
func statsQuery(_ http.ResponseWriter, r *http.Request, _ httprouter.Params) (history bool, err error) {
	switch h := r.URL.Query().Get("history"); h {
	case "", "1", "true":
		return true, nil
	case "0", "false":
		return false, nil
	default:
		return false, web.Invalid("query parameter \"history\" must be 0 or 1; got %q", h)
	}
}

// Stats counts jobs and workers. The job counts come from the per-status
// counters, not from the history.
func (a *API) Stats(ctx context.Context, history bool) (api.Stats, error) {
	if _, err := authorize(ctx, auth.ScopeQueueView); err != nil {
		return api.Stats{}, err
	}
	var counts map[protocol.JobStatus]int
	var err error
	if history {
		counts, err = a.store.CountJobs(ctx)
	} else {
		counts, err = a.store.CountJobsIn(ctx, append([]protocol.JobStatus{protocol.JobQueued}, protocol.ActiveJobStatuses()...))
	}
	if err != nil {
		return api.Stats{}, err
	}
	byWorker, gpus, err := a.fleetSummary(ctx)
	if err != nil {
		return api.Stats{}, err
	}
	recent, err := a.recentEndCounts(ctx)
	if err != nil {
		return api.Stats{}, err
	}
	total := 0
	for _, n := range byWorker {
		total += n
	}
	byStatus := map[string]int{}
	for k, v := range counts {
		byStatus[string(k)] = v
	}
	return api.Stats{
		QueueDepth: counts[protocol.JobQueued],
		Running:    counts[protocol.JobDispatched] + counts[protocol.JobRunning] + counts[protocol.JobCanceling],
		ByStatus:   byStatus,
		Workers: map[string]int{
			"total": total, "idle": byWorker[protocol.WorkerIdle], "partial": byWorker[protocol.WorkerPartial], "busy": byWorker[protocol.WorkerBusy],
			"draining": byWorker[protocol.WorkerDraining], "offline": byWorker[protocol.WorkerOffline],
			"connecting": byWorker[protocol.WorkerConnecting], "disconnected": byWorker[protocol.WorkerDisconnected],
		},
		GPUs: gpus,
		Last24h: map[string]int{
			"completed": recent[protocol.JobCompleted], "failed": recent[protocol.JobFailed], "cancelled": recent[protocol.JobCancelled],
		},
	}, nil
}
