package dashboard

import (
	"encoding/json"
	"fmt"

	"github.com/simpletuner/simpletuner-orchestration/internal/audit"
)

// The API's JSON as the pages read it.

type workerJSON struct {
	ID            string            `json:"worker_id"`
	Name          string            `json:"name"`
	WorkerType    string            `json:"worker_type"`
	Status        string            `json:"status"`
	GPUInfo       json.RawMessage   `json:"gpu_info"`
	Labels        map[string]string `json:"labels"`
	CurrentJobID  *string           `json:"current_job_id"`
	LastHeartbeat *string           `json:"last_heartbeat"`
	CreatedAt     string            `json:"created_at"`
	Connected     bool              `json:"connected"`
	UptimeSeconds *float64          `json:"uptime_seconds"`
	GPUCount      int               `json:"gpu_count"`
	GPUName       string            `json:"gpu_name"`
	GPUVRAMGB     float64           `json:"gpu_vram_gb"`
	Local         bool              `json:"local"`
	Protocol      int               `json:"protocol"`
	AgentVersion  string            `json:"agent_version"`
	RunningJobs   int               `json:"running_jobs"`
	MaxJobs       int               `json:"max_jobs"`
	GPUsFree      int               `json:"gpus_free"`
	GPUTelemetry  *struct {
		At   string    `json:"at"`
		GPUs []gpuLive `json:"gpus"`
	} `json:"gpu_telemetry"`
	GPUConditions []gpuCondition `json:"gpu_conditions"`
}

type gpuLive struct {
	UUID           string  `json:"uuid"`
	UtilizationPct float64 `json:"utilization_pct"`
	MemoryUsedMiB  float64 `json:"memory_used_mib"`
	TemperatureC   float64 `json:"temperature_c"`
	PowerW         float64 `json:"power_w"`
	Health         string  `json:"health"`
}

// gpuCondition is a GPU the worker keeps out of use.
type gpuCondition struct {
	Index    int    `json:"index"`
	State    string `json:"state"`
	Reason   string `json:"reason"`
	Since    string `json:"since"`
	Clearing bool   `json:"clearing"`
}

// Agent names the software on the worker: simpletuner-workerd speaks
// protocol 2, SimpleTuner's own agent protocol 1.
func (w workerJSON) Agent() string {
	name := "SimpleTuner agent"
	if w.Protocol >= 2 {
		name = "simpletuner-workerd"
	}
	if w.Protocol == 0 {
		return "not registered yet"
	}
	if w.AgentVersion != "" {
		name += " " + w.AgentVersion
	}
	return name
}

// gpuDevice is one GPU with its live numbers when a heartbeat brought them,
// and its condition when the worker keeps it out of use.
type gpuDevice struct {
	Index       int
	Name        string
	MemoryMiB   float64
	Live        bool
	Utilization float64
	MemUsedMiB  float64
	Temperature float64
	PowerW      float64
	Health      string // the live health: ok, or a warning
	Condition   *gpuCondition
}

// Devices pairs the GPUs the worker registered with its latest telemetry.
func (w workerJSON) Devices() []gpuDevice {
	var info struct {
		Devices []struct {
			Index     int     `json:"index"`
			UUID      string  `json:"uuid"`
			Name      string  `json:"name"`
			MemoryMiB float64 `json:"memory_mib"`
		} `json:"devices"`
	}
	_ = json.Unmarshal(w.GPUInfo, &info)
	live := map[string]gpuLive{}
	var liveList []gpuLive
	if w.GPUTelemetry != nil {
		liveList = w.GPUTelemetry.GPUs
		for _, g := range liveList {
			live[g.UUID] = g
		}
	}
	var out []gpuDevice
	for _, d := range info.Devices {
		g := gpuDevice{Index: d.Index, Name: d.Name, MemoryMiB: d.MemoryMiB}
		if l, ok := live[d.UUID]; ok {
			g.Live, g.Utilization, g.MemUsedMiB, g.Temperature = true, l.UtilizationPct, l.MemoryUsedMiB, l.TemperatureC
			g.PowerW, g.Health = l.PowerW, l.Health
		}
		for i := range w.GPUConditions {
			if w.GPUConditions[i].Index == d.Index {
				g.Condition = &w.GPUConditions[i]
			}
		}
		out = append(out, g)
	}
	if len(out) == 0 { // telemetry without a device list (another agent)
		for i, l := range liveList {
			out = append(out, gpuDevice{Index: i, Live: true, Utilization: l.UtilizationPct, MemUsedMiB: l.MemoryUsedMiB, Temperature: l.TemperatureC})
		}
	}
	return out
}

type statsJSON struct {
	QueueDepth int            `json:"queue_depth"`
	Running    int            `json:"running"`
	ByStatus   map[string]int `json:"by_status"`
	Workers    map[string]int `json:"workers"`
	GPUs       []struct {
		Model   string  `json:"model"`
		VRAMGB  float64 `json:"vram_gb"`
		Total   int     `json:"total"`
		InUse   int     `json:"in_use"`
		Offline int     `json:"offline"`
	} `json:"gpus"`
	Last24h map[string]int `json:"last_24h"`
}

type jobJSON struct {
	ID           string            `json:"job_id"`
	Status       string            `json:"status"`
	ConfigName   *string           `json:"config_name"`
	Target       string            `json:"target"`
	Priority     int               `json:"priority"`
	WorkerLabels map[string]string `json:"worker_labels"`
	GPUCount     int               `json:"gpu_count"`
	GPUAlloc     string            `json:"gpu_allocation"`
	MinVRAMGB    float64           `json:"min_vram_gb"`
	MaxRetries   int               `json:"max_retries"`
	RetriesUsed  int               `json:"retries_used"`
	Attempt      int               `json:"attempt"`
	WorkerID     *string           `json:"worker_id"`
	Error        *string           `json:"error_message"`
	SubmittedBy  string            `json:"submitted_by"`
	QueuedAt     string            `json:"queued_at"`
	UpdatedAt    string            `json:"updated_at"`
	StartedAt    *string           `json:"started_at"`
	CompletedAt  *string           `json:"completed_at"`
	Config       json.RawMessage   `json:"config"`
	// Checkpoints is false for a job submitted with checkpoints off;
	// Checkpoint is its newest complete one, where a retry resumes.
	Checkpoints     *bool `json:"checkpoints"`
	CheckpointsKept int   `json:"checkpoints_kept"`
	Checkpoint      *struct {
		Name      string  `json:"name"`
		Step      int64   `json:"step"`
		Attempt   int     `json:"attempt"`
		Bytes     float64 `json:"bytes"`
		CreatedAt string  `json:"created_at"`
		Files     []struct {
			Path string `json:"path"`
		} `json:"files"`
	} `json:"checkpoint"`
	Attempts []struct {
		Attempt      int     `json:"attempt"`
		WorkerID     string  `json:"worker_id"`
		DispatchedAt string  `json:"dispatched_at"`
		StartedAt    *string `json:"started_at"`
		EndedAt      *string `json:"ended_at"`
		Outcome      *string `json:"outcome"`
		Error        *string `json:"error"`
		attemptUsage
	} `json:"attempts"`
}

// attemptUsage is what an attempt used, as its worker measured it.
type attemptUsage struct {
	CPUSeconds         *float64 `json:"cpu_seconds"`
	PeakMemoryBytes    *float64 `json:"peak_memory_bytes"`
	GPUs               []int    `json:"gpus"`
	GPUSeconds         *float64 `json:"gpu_seconds"`
	PeakGPUMemoryBytes *float64 `json:"peak_gpu_memory_bytes"`
	GPUUtilizationPct  *float64 `json:"gpu_utilization_pct"`
	GPUEvents          []string `json:"gpu_events"`
}

// Terminal reports whether the job can no longer change.
func (j jobJSON) Terminal() bool {
	return j.Status == "completed" || j.Status == "failed" || j.Status == "cancelled"
}

// Cancellable reports whether a cancel request can still change the job.
func (j jobJSON) Cancellable() bool { return !j.Terminal() && j.Status != "canceling" }

type auditPage struct {
	Records []audit.Record `json:"records"`
}

type verifyJSON struct {
	OK       bool   `json:"ok"`
	Checked  int    `json:"checked"`
	FirstSeq int64  `json:"first_seq"` // after retention, the record after the checkpoint
	HeadSeq  int64  `json:"head_seq"`
	BrokenAt int64  `json:"broken_at"`
	Error    string `json:"error"`
}

// workerHistoryJSON is GET /api/admin/workers/{id}/gpu-history.
type workerHistoryJSON struct {
	GPUs []struct {
		Index          int        `json:"index"`
		UtilizationPct []*float64 `json:"utilization_pct"`
		MemoryUsedPct  []*float64 `json:"memory_used_pct"`
	} `json:"gpus"`
}

// charts are the worker's GPU charts, one per GPU.
func (h workerHistoryJSON) charts() []chart {
	var out []chart
	for _, g := range h.GPUs {
		out = append(out, newChart(fmt.Sprintf("GPU %d, last 6 hours: utilisation and memory in use, percent", g.Index), "%", 100,
			line{Class: "util", Label: "utilisation", Points: g.UtilizationPct},
			line{Class: "mem", Label: "memory in use", Points: g.MemoryUsedPct}))
	}
	return out
}

// fleetHistoryJSON is GET /api/admin/fleet/gpu-history.
type fleetHistoryJSON struct {
	InUse  []*float64 `json:"in_use"`
	Asked  []*float64 `json:"asked"`
	Online []*float64 `json:"online"`
}

func (h fleetHistoryJSON) chart() chart {
	return newChart("The fleet's GPUs, last 6 hours: in use, asked for by queued jobs, online", "GPUs", 1,
		line{Class: "online", Label: "online", Points: h.Online},
		line{Class: "asked", Label: "asked for by queued jobs", Points: h.Asked},
		line{Class: "util", Label: "in use", Points: h.InUse})
}
