package orchestrator

import (
	"encoding/json"
	"math"
	"slices"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
	"github.com/simpletuner/simpletuner-orchestration/internal/store"
)

func timePtr(t *time.Time) *string {
	if t == nil {
		return nil
	}
	s := protocol.Time(*t)
	return &s
}

func strPtr(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// workerView is a worker as the admin API shows it: upstream's fields plus the
// names SimpleTuner's guides use.
type workerView struct {
	WorkerID        string            `json:"worker_id"`
	ID              string            `json:"id"`
	Name            string            `json:"name"`
	WorkerType      string            `json:"worker_type"`
	Status          string            `json:"status"`
	GPUInfo         json.RawMessage   `json:"gpu_info"`
	Provider        *string           `json:"provider"`
	Labels          map[string]string `json:"labels"`
	LabelsLocked    bool              `json:"labels_locked"`
	CurrentJobID    *string           `json:"current_job_id"`
	LastHeartbeat   *string           `json:"last_heartbeat"`
	ConnectedAt     *string           `json:"connected_at"`
	CreatedAt       string            `json:"created_at"`
	Connected       bool              `json:"connected"`
	UptimeSeconds   *float64          `json:"uptime_seconds"`
	GPUCount        int               `json:"gpu_count"`
	GPUName         string            `json:"gpu_name"`
	GPUVRAMGB       float64           `json:"gpu_vram_gb"`
	AcceleratorType *string           `json:"accelerator_type"`
	Local           bool              `json:"local"`
	Protocol        int               `json:"protocol"`
	AgentVersion    string            `json:"agent_version,omitempty"`
	// Capabilities is what a protocol-2 worker reported about itself.
	Capabilities protocol.Capabilities `json:"capabilities"`
	// GPUTelemetry is the latest live GPU numbers this instance received in
	// the worker's heartbeats; null when none (protocol 1, no GPUs, offline).
	GPUTelemetry *gpuTelemetry `json:"gpu_telemetry"`
	// ClockSkewSeconds is how far the worker's clock was ahead of this
	// instance's (negative: behind) at its last heartbeat here; null when
	// unknown. Informational: nothing depends on worker clocks.
	ClockSkewSeconds *float64 `json:"clock_skew_seconds"`
	// RunningJobs is how many attempts are out on the worker, MaxJobs how
	// many it may run at once, GPUsFree how many of its GPUs none holds.
	RunningJobs int `json:"running_jobs"`
	MaxJobs     int `json:"max_jobs"`
	GPUsFree    int `json:"gpus_free"`
	// GPUConditions are the GPUs the worker keeps out of use: held back
	// (something was left on them) or unhealthy (a hardware fault), with
	// clearing set once an admin cleared a fence the worker still reports.
	GPUConditions []gpuConditionView `json:"gpu_conditions"`
}

type gpuConditionView struct {
	protocol.GPUCondition
	Clearing bool `json:"clearing,omitempty"`
}

func (s *Server) workerView(w store.Worker) workerView {
	g := protocol.ParseGPUInfo(w.GPUInfo)
	gpuInfo := w.GPUInfo
	if len(gpuInfo) == 0 {
		gpuInfo = json.RawMessage(`{}`)
	}
	labels := w.Labels
	if labels == nil {
		labels = map[string]string{}
	}
	// Connected means a stream is open on some instance; StreamInstance is kept
	// in the store so that every replica answers alike.
	status, connected := s.shown(w)
	v := workerView{
		WorkerID: w.ID, ID: w.ID, Name: w.Name, WorkerType: string(w.Type), Status: string(status),
		GPUInfo: gpuInfo, Provider: strPtr(w.Provider), Labels: labels, LabelsLocked: w.LabelsLocked, CurrentJobID: strPtr(w.CurrentJobID),
		LastHeartbeat: timePtr(w.LastHeartbeat), ConnectedAt: timePtr(w.ConnectedAt),
		CreatedAt: protocol.Time(w.CreatedAt), Connected: connected,
		GPUCount: g.Count, GPUName: g.Name, GPUVRAMGB: g.VRAMGB, AcceleratorType: strPtr(g.Accelerator),
		Local: w.Local, Protocol: w.Protocol, AgentVersion: w.AgentVersion, Capabilities: w.Capabilities,
		GPUTelemetry:     s.telemetry.get(w.ID),
		ClockSkewSeconds: s.clocks.seconds(w.ID),
		RunningJobs:      w.Running, MaxJobs: w.Slots(), GPUsFree: w.FreeUsableGPUs(),
		GPUConditions: []gpuConditionView{},
	}
	for _, c := range w.GPUConditions {
		v.GPUConditions = append(v.GPUConditions, gpuConditionView{GPUCondition: c, Clearing: slices.Contains(w.GPUClears, c.Index)})
	}
	if connected && w.ConnectedAt != nil {
		up := math.Round(time.Since(*w.ConnectedAt).Seconds()*10) / 10
		v.UptimeSeconds = &up
	}
	return v
}

// jobView is a job as the queue API shows it. Secrets (hf_token, upload
// tokens) are never part of it.
type jobView struct {
	JobID        string            `json:"job_id"`
	ID           string            `json:"id"`
	Status       string            `json:"status"`
	ConfigName   *string           `json:"config_name"`
	Target       string            `json:"target"`
	Priority     int               `json:"priority"`
	WorkerLabels map[string]string `json:"worker_labels"`
	// GPUCount is null for a job that takes the whole worker (WholeWorker);
	// GPUAllocation says either in words.
	GPUCount       *int            `json:"gpu_count"`
	WholeWorker    bool            `json:"whole_worker"`
	GPUAllocation  string          `json:"gpu_allocation"`
	MinVRAMGB      float64         `json:"min_vram_gb"`
	MaxRetries     int             `json:"max_retries"`
	RetriesUsed    int             `json:"retries_used"`
	Attempt        int             `json:"attempt"`
	WorkerID       *string         `json:"worker_id"`
	Error          *string         `json:"error_message"`
	Progress       json.RawMessage `json:"progress,omitempty"`
	TimeoutSeconds int             `json:"timeout_seconds,omitempty"`
	SubmittedBy    string          `json:"submitted_by,omitempty"`
	QueuedAt       string          `json:"queued_at"`
	UpdatedAt      string          `json:"updated_at"`
	StartedAt      *string         `json:"started_at"`
	CompletedAt    *string         `json:"completed_at"`
	Config         json.RawMessage `json:"config,omitempty"`
	Attempts       []attemptView   `json:"attempts,omitempty"`
	// WaitingReason and WaitingDetail say why a queued job has not started.
	WaitingReason string `json:"waiting_reason,omitempty"`
	WaitingDetail string `json:"waiting_detail,omitempty"`
}

type attemptView struct {
	Attempt      int     `json:"attempt"`
	WorkerID     string  `json:"worker_id"`
	DispatchedAt string  `json:"dispatched_at"`
	StartedAt    *string `json:"started_at"`
	EndedAt      *string `json:"ended_at"`
	Outcome      *string `json:"outcome"`
	Error        *string `json:"error"`
	// CPUSeconds and PeakMemoryBytes are what the attempt's processes used,
	// when its worker reported it; the GPU fields what they used of its GPUs.
	CPUSeconds         *float64 `json:"cpu_seconds,omitempty"`
	PeakMemoryBytes    *uint64  `json:"peak_memory_bytes,omitempty"`
	GPUSeconds         *float64 `json:"gpu_seconds,omitempty"`
	PeakGPUMemoryBytes *uint64  `json:"peak_gpu_memory_bytes,omitempty"`
	GPUUtilizationPct  *float64 `json:"gpu_utilization_pct,omitempty"`
	// GPUEvents are the GPU errors the driver raised that were the job's
	// own (application XIDs).
	GPUEvents []string `json:"gpu_events,omitempty"`
	// GPUs are the indices of the worker's GPUs the attempt held.
	GPUs []int `json:"gpus,omitempty"`
}

func newJobView(j store.Job) jobView {
	labels := j.WorkerLabels
	if labels == nil {
		labels = map[string]string{}
	}
	return jobView{
		JobID: j.ID, ID: j.ID, Status: string(j.Status), ConfigName: strPtr(j.ConfigName), Target: string(j.Target),
		Priority: j.Priority, WorkerLabels: labels, GPUCount: gpuCountView(j), WholeWorker: j.WholeWorker,
		GPUAllocation: protocol.GPUAllocation(j.GPUCount, j.WholeWorker), MinVRAMGB: j.MinVRAMGB,
		MaxRetries: j.MaxRetries, RetriesUsed: j.RetriesUsed, Attempt: j.Attempt, WorkerID: strPtr(j.WorkerID),
		Error: strPtr(j.Error), Progress: j.Progress, TimeoutSeconds: j.TimeoutSeconds, SubmittedBy: j.SubmittedBy,
		QueuedAt: protocol.Time(j.CreatedAt), UpdatedAt: protocol.Time(j.UpdatedAt),
		StartedAt: timePtr(j.StartedAt), CompletedAt: timePtr(j.EndedAt),
	}
}

func newAttemptView(a store.Attempt) attemptView {
	v := attemptView{
		GPUs:    a.GPUs,
		Attempt: a.Number, WorkerID: a.WorkerID, DispatchedAt: protocol.Time(a.DispatchedAt),
		StartedAt: timePtr(a.AckedAt), EndedAt: timePtr(a.EndedAt), Outcome: strPtr(string(a.Outcome)), Error: strPtr(a.Error),
	}
	if u := a.Usage; u != nil {
		v.CPUSeconds, v.PeakMemoryBytes, v.GPUUtilizationPct, v.GPUEvents = &u.CPUSeconds, &u.PeakMemoryBytes, u.GPUUtilizationPct, u.GPUEvents
		if len(a.GPUs) > 0 || u.GPUSeconds > 0 {
			v.GPUSeconds, v.PeakGPUMemoryBytes = &u.GPUSeconds, &u.PeakGPUMemoryBytes
		}
	}
	if v.GPUSeconds == nil && len(a.GPUs) > 0 && a.AckedAt != nil && a.EndedAt != nil {
		// A worker that does not measure its GPUs (SimpleTuner's own agent):
		// the GPUs it held for as long as the attempt ran.
		s := float64(len(a.GPUs)) * a.EndedAt.Sub(*a.AckedAt).Seconds()
		v.GPUSeconds = &s
	}
	return v
}

// gpuCountView is a job's gpu_count as the API shows it: null for a job that
// takes the whole worker.
func gpuCountView(j store.Job) *int {
	if j.WholeWorker {
		return nil
	}
	n := j.GPUCount
	return &n
}
