package adminapi

import (
	"encoding/json"
	"math"
	"slices"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/api"
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

// workerView is a worker as the admin API shows it.
func (a *API) workerView(w store.Worker) api.Worker {
	g := w.GPUInfo
	gpuInfo := g.Raw
	if len(gpuInfo) == 0 {
		gpuInfo = json.RawMessage(`{}`)
	}
	labels := w.Labels
	if labels == nil {
		labels = map[string]string{}
	}
	// Connected means a stream is open on some instance; StreamInstance is kept
	// in the store so that every replica answers alike.
	status, connected := a.workers.Shown(w)
	capa := w.Capacity()
	v := api.Worker{
		WorkerID: w.ID, ID: w.ID, Name: w.Name, WorkerType: string(w.Type), Status: string(status),
		GPUInfo: gpuInfo, Provider: strPtr(w.Provider), Labels: labels, LabelsLocked: w.LabelsLocked, CurrentJobID: strPtr(w.CurrentJobID),
		LastHeartbeat: timePtr(w.LastHeartbeat), ConnectedAt: timePtr(w.ConnectedAt),
		CreatedAt: protocol.Time(w.CreatedAt), Connected: connected,
		GPUCount: g.Count, GPUName: g.Name, GPUVRAMGB: g.VRAMGB, AcceleratorType: strPtr(g.Accelerator),
		Local: w.Local, Protocol: w.Protocol, AgentVersion: w.AgentVersion, Capabilities: w.Capabilities,
		GPUTelemetry:     a.heard.Telemetry(w.ID),
		ClockSkewSeconds: a.heard.ClockSkewSeconds(w.ID),
		RunningJobs:      w.Running, MaxJobs: capa.Slots(), GPUsFree: capa.FreeUsableGPUs(),
		GPUConditions: []api.GPUCondition{},
	}
	for _, c := range w.GPUConditions {
		v.GPUConditions = append(v.GPUConditions, api.GPUCondition{GPUCondition: c, Clearing: slices.Contains(w.GPUClears, c.Index)})
	}
	if connected && w.ConnectedAt != nil {
		up := math.Round(time.Since(*w.ConnectedAt).Seconds()*10) / 10
		v.UptimeSeconds = &up
	}
	return v
}

// newJobView is a job as the queue API shows it. Secrets (hf_token, upload
// tokens) are never part of it.
func newJobView(j store.Job) api.Job {
	labels := j.WorkerLabels
	if labels == nil {
		labels = map[string]string{}
	}
	return api.Job{
		JobID: j.ID, ID: j.ID, Status: string(j.Status), ConfigName: strPtr(j.ConfigName), Target: string(j.Target),
		Priority: j.Priority, WorkerLabels: labels, GPUCount: gpuCountView(j), WholeWorker: j.WholeWorker,
		GPUAllocation: protocol.GPUAllocation(j.GPUCount, j.WholeWorker), MinVRAMGB: j.MinVRAMGB,
		MaxRetries: j.MaxRetries, RetriesUsed: j.RetriesUsed, Attempt: j.Attempt, WorkerID: strPtr(j.WorkerID),
		Error: strPtr(j.Error), Progress: j.Progress, TimeoutSeconds: j.TimeoutSeconds, SubmittedBy: j.SubmittedBy, Team: teamName(j.Team),
		QueuedAt: protocol.Time(j.CreatedAt), UpdatedAt: protocol.Time(j.UpdatedAt),
		StartedAt: timePtr(j.StartedAt), CompletedAt: timePtr(j.EndedAt), Checkpoints: !j.NoCheckpoints,
	}
}

func newAttemptView(a store.Attempt) api.Attempt {
	v := api.Attempt{
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
