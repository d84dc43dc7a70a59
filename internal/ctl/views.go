package ctl

import (
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// The API's objects as simpletunerctl reads them. Only what the tables show
// is decoded; -o json prints the reply itself, so fields added by newer
// orchestrators reach scripts without a new client.

// Worker is an entry of GET /api/admin/workers.
type Worker struct {
	ID              string            `json:"worker_id"`
	Name            string            `json:"name"`
	WorkerType      string            `json:"worker_type"`
	Status          string            `json:"status"`
	Labels          map[string]string `json:"labels"`
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
	AgentVersion    string            `json:"agent_version"`
	Provider        *string           `json:"provider"`

	// Newer orchestrators report these; older ones leave them out and the
	// client derives what it can.
	GPUsFree     *int            `json:"gpus_free"`
	RunningJobs  json.RawMessage `json:"running_jobs"` // a list of ids or {job_id} objects, or a count
	Capabilities struct {
		Isolation string `json:"isolation"` // how the worker walls its jobs off
	} `json:"capabilities"`
	// GPUConditions are the GPUs the worker keeps out of use.
	GPUConditions []GPUCondition `json:"gpu_conditions"`
	GPUTelemetry  *struct {
		GPUs []GPULive `json:"gpus"`
	} `json:"gpu_telemetry"`
}

// GPUCondition is a GPU held back or fenced as unhealthy.
type GPUCondition struct {
	Index    int    `json:"index"`
	UUID     string `json:"uuid"`
	State    string `json:"state"`
	Reason   string `json:"reason"`
	Since    string `json:"since"`
	Clearing bool   `json:"clearing"`
}

// GPULive is one GPU's latest numbers.
type GPULive struct {
	Index          int     `json:"index"`
	UUID           string  `json:"uuid"`
	UtilizationPct float64 `json:"utilization_pct"`
	MemoryUsedMiB  float64 `json:"memory_used_mib"`
	MemoryTotalMiB float64 `json:"memory_total_mib"`
	TemperatureC   float64 `json:"temperature_c"`
	PowerW         float64 `json:"power_w"`
	Health         string  `json:"health"`
}

// GPUsOut says how many GPUs the worker keeps out of use, for the tables:
// "1 unhealthy", "2 held"; "" when none.
func (w Worker) GPUsOut() string {
	n := map[string]int{}
	for _, c := range w.GPUConditions {
		n[c.State]++
	}
	var parts []string
	for _, st := range []string{"unhealthy", "held"} {
		if n[st] > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", n[st], st))
		}
	}
	return strings.Join(parts, ", ")
}

// Jobs lists the jobs the worker runs now: running_jobs when the orchestrator
// sends a list, else current_job_id. extra counts jobs known only by number.
func (w Worker) Jobs() (ids []string, extra int) {
	raw := strings.TrimSpace(string(w.RunningJobs))
	switch {
	case strings.HasPrefix(raw, "["):
		var items []json.RawMessage
		if json.Unmarshal(w.RunningJobs, &items) == nil {
			for _, it := range items {
				var s string
				if json.Unmarshal(it, &s) == nil {
					ids = append(ids, s)
					continue
				}
				var o struct {
					JobID string `json:"job_id"`
					ID    string `json:"id"`
				}
				if json.Unmarshal(it, &o) == nil && first(o.JobID, o.ID) != "" {
					ids = append(ids, first(o.JobID, o.ID))
				} else {
					extra++
				}
			}
			return ids, extra
		}
	case raw != "" && raw != "null":
		if n, err := strconv.Atoi(raw); err == nil && n > 0 {
			if w.CurrentJobID != nil && *w.CurrentJobID != "" {
				return []string{*w.CurrentJobID}, n - 1
			}
			return nil, n
		}
	}
	if w.CurrentJobID != nil && *w.CurrentJobID != "" {
		return []string{*w.CurrentJobID}, 0
	}
	return nil, 0
}

// GPUsFreeText is "free/total", and how many GPUs the worker keeps out of
// use: "0/8 (1 held)".
func (w Worker) GPUsFreeText() string {
	if out := w.GPUsOut(); out != "" {
		return w.gpusFree() + " (" + out + ")"
	}
	return w.gpusFree()
}

// gpusFree is "free/total". Without gpus_free from the orchestrator an idle
// connected worker has all its GPUs free and any other none, which is what
// the scheduler acts on.
func (w Worker) gpusFree() string {
	free := 0
	switch {
	case w.GPUsFree != nil:
		free = *w.GPUsFree
	case w.Status == "idle" && w.Connected:
		free = w.GPUCount
	case w.Status == "offline" || w.Status == "connecting":
		return fmt.Sprintf("-/%d", w.GPUCount)
	}
	return fmt.Sprintf("%d/%d", free, w.GPUCount)
}

// Job is an entry of GET /api/queue, or GET /api/queue/{id} with attempts.
type Job struct {
	ID             string            `json:"job_id"`
	Status         string            `json:"status"`
	ConfigName     *string           `json:"config_name"`
	Target         string            `json:"target"`
	Priority       int               `json:"priority"`
	WorkerLabels   map[string]string `json:"worker_labels"`
	GPUCount       int               `json:"gpu_count"`
	GPUAllocation  string            `json:"gpu_allocation"`
	MinVRAMGB      float64           `json:"min_vram_gb"`
	MaxRetries     int               `json:"max_retries"`
	RetriesUsed    int               `json:"retries_used"`
	Attempt        int               `json:"attempt"`
	WorkerID       *string           `json:"worker_id"`
	Error          *string           `json:"error_message"`
	Progress       json.RawMessage   `json:"progress"`
	TimeoutSeconds int               `json:"timeout_seconds"`
	SubmittedBy    string            `json:"submitted_by"`
	QueuedAt       string            `json:"queued_at"`
	UpdatedAt      string            `json:"updated_at"`
	StartedAt      *string           `json:"started_at"`
	CompletedAt    *string           `json:"completed_at"`
	Attempts       []Attempt         `json:"attempts"`
	// WaitingReason, from newer orchestrators, says why a queued job is not
	// running (a code); WaitingDetail says it in a sentence.
	WaitingReason *string `json:"waiting_reason"`
	WaitingDetail *string `json:"waiting_detail"`
}

// Attempt is one dispatch of a job.
type Attempt struct {
	Attempt      int     `json:"attempt"`
	WorkerID     string  `json:"worker_id"`
	DispatchedAt string  `json:"dispatched_at"`
	StartedAt    *string `json:"started_at"`
	EndedAt      *string `json:"ended_at"`
	Outcome      *string `json:"outcome"`
	Error        *string `json:"error"`
	// What the attempt's processes used, once it ended on a worker that
	// measures it.
	CPUSeconds         *float64 `json:"cpu_seconds,omitempty"`
	PeakMemoryBytes    *int64   `json:"peak_memory_bytes,omitempty"`
	GPUs               []int    `json:"gpus,omitempty"`
	GPUSeconds         *float64 `json:"gpu_seconds,omitempty"`
	PeakGPUMemoryBytes *int64   `json:"peak_gpu_memory_bytes,omitempty"`
	GPUUtilizationPct  *float64 `json:"gpu_utilization_pct,omitempty"`
	GPUEvents          []string `json:"gpu_events,omitempty"`
}

// Terminal reports whether a job status can never change again.
func Terminal(status string) bool {
	return status == "completed" || status == "failed" || status == "cancelled"
}

// Token is an entry of GET /api/admin/tokens.
type Token struct {
	ID        string   `json:"id"`
	Name      string   `json:"name"`
	Scopes    []string `json:"scopes"`
	CreatedAt string   `json:"created_at"`
	RevokedAt *string  `json:"revoked_at"`
}

// Artifact is one file a job produced, from GET /api/queue/{id}/artifacts.
// Orchestrators may spell the fields differently; UnmarshalJSON takes the
// likely names.
type Artifact struct {
	Path     string
	Size     int64
	HasSize  bool
	Modified string
	SHA256   string
}

// UnmarshalJSON accepts path|name, size|size_bytes, modified|modified_at|mtime.
func (a *Artifact) UnmarshalJSON(b []byte) error {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		return err
	}
	str := func(keys ...string) string {
		for _, k := range keys {
			var s string
			if json.Unmarshal(m[k], &s) == nil && s != "" {
				return s
			}
		}
		return ""
	}
	a.Path = str("path", "name")
	a.Modified = str("modified_at", "modified", "mtime", "updated_at")
	a.SHA256 = str("sha256", "checksum")
	for _, k := range []string{"size", "size_bytes", "bytes"} {
		var n int64
		if json.Unmarshal(m[k], &n) == nil && m[k] != nil {
			a.Size, a.HasSize = n, true
			break
		}
	}
	return nil
}

// decodeArtifacts reads the listing: a bare list, or an object holding the
// list under artifacts, files or entries.
func decodeArtifacts(raw []byte) ([]Artifact, error) {
	var list []Artifact
	if err := json.Unmarshal(raw, &list); err == nil {
		return list, nil
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(raw, &obj); err != nil {
		return nil, fmt.Errorf("the artifact listing is neither a JSON list nor an object")
	}
	for _, k := range []string{"artifacts", "files", "entries"} {
		if v, ok := obj[k]; ok {
			if err := json.Unmarshal(v, &list); err != nil {
				return nil, fmt.Errorf("the artifact listing's %q is not a list of files: %v", k, err)
			}
			return list, nil
		}
	}
	return nil, fmt.Errorf("the artifact listing holds no \"artifacts\" list")
}

// labelsText is "k=v,k2=v2" in key order.
func labelsText(m map[string]string) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + m[k]
	}
	return strings.Join(parts, ",")
}

// parseLabels reads k=v arguments; flag names the option for messages.
func parseLabels(flag string, args []string) (map[string]string, error) {
	out := map[string]string{}
	for _, a := range args {
		k, v, ok := strings.Cut(a, "=")
		k = strings.TrimSpace(k)
		if !ok || k == "" {
			return nil, usagef("%s %q: want key=value", flag, a)
		}
		if _, dup := out[k]; dup {
			return nil, usagef("%s: the key %q is given twice", flag, k)
		}
		out[k] = v
	}
	return out, nil
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
