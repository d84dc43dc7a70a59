package webhook

import (
	"crypto/rand"
	"encoding/base32"
	"encoding/json"
	"net/url"
	"strings"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/store"
	"github.com/simpletuner/simpletuner-orchestration/internal/webhook/spec"
)

// Payload is the body of a request in the json format: the event, and what
// it is about (a job, a worker, a GPU, a checkpoint).
type Payload struct {
	ID         string          `json:"id"`
	Type       string          `json:"type"`
	Time       string          `json:"time"`
	Job        *JobInfo        `json:"job,omitempty"`
	Worker     *WorkerInfo     `json:"worker,omitempty"`
	GPU        *GPUInfo        `json:"gpu,omitempty"`
	Checkpoint *CheckpointInfo `json:"checkpoint,omitempty"`
}

// JobInfo is a job as an event finds it.
type JobInfo struct {
	ID          string `json:"id"`
	ConfigName  string `json:"config_name"`
	SubmittedBy string `json:"submitted_by"`
	Team        string `json:"team"`
	Status      string `json:"status"`
	Attempt     int    `json:"attempt"`
	WorkerID    string `json:"worker_id,omitempty"`
	Priority    int    `json:"priority"`
	RetriesUsed int    `json:"retries_used"`
	MaxRetries  int    `json:"max_retries"`
	CreatedAt   string `json:"created_at"`
	StartedAt   string `json:"started_at,omitempty"`
	EndedAt     string `json:"ended_at,omitempty"`
	// Outcome is how the attempt the event ended, ended (completed, failed,
	// cancelled, worker_lost, withdrawn, timeout, gpu_fault).
	Outcome string `json:"outcome,omitempty"`
	Error   string `json:"error,omitempty"`
	// Reason says why a job went back to the queue.
	Reason string `json:"reason,omitempty"`
	// Approval is the job's approval request, in the approval events.
	Approval *ApprovalInfo `json:"approval,omitempty"`
	Links    Links         `json:"links"`
}

// ApprovalInfo is a held job's approval request as an event finds it.
type ApprovalInfo struct {
	RequestID int64  `json:"request_id"`
	Rule      string `json:"rule"`
	// Reason says what matched the rule; a rejection's reason is in
	// Notes.
	Reason string `json:"reason"`
	Status string `json:"status"`
	By     string `json:"by,omitempty"`
	Notes  string `json:"notes,omitempty"`
}

// Links point at the job in the orchestrator's API and dashboard: absolute
// when the orchestrator knows its public URL (server.public_url), else paths
// on it.
type Links struct {
	Job       string `json:"job"`
	Logs      string `json:"logs"`
	Artifacts string `json:"artifacts"`
	Dashboard string `json:"dashboard"`
}

// WorkerInfo is a worker as an event finds it.
type WorkerInfo struct {
	ID            string `json:"id"`
	Name          string `json:"name"`
	Status        string `json:"status"`
	Reason        string `json:"reason,omitempty"`
	LastHeartbeat string `json:"last_heartbeat,omitempty"`
}

// GPUInfo is the GPU a worker fenced.
type GPUInfo struct {
	Index  int    `json:"index"`
	UUID   string `json:"uuid,omitempty"`
	State  string `json:"state"`
	Reason string `json:"reason"`
}

// CheckpointInfo is a checkpoint a job saved.
type CheckpointInfo struct {
	Attempt int    `json:"attempt"`
	Path    string `json:"path"`
	Bytes   int64  `json:"bytes,omitempty"`
	Link    string `json:"link,omitempty"`
}

var idEncoding = base32.StdEncoding.WithPadding(base32.NoPadding)

// NewEventID returns "evt_" and 20 random base32 characters (100 bits).
func NewEventID() string {
	b := make([]byte, 13)
	_, _ = rand.Read(b) // crypto/rand never fails
	return "evt_" + strings.ToLower(idEncoding.EncodeToString(b))[:20]
}

// teamOf is a job's team (a job stored before teams existed is the
// default team's).
func teamOf(j store.Job) string {
	if j.Team == "" {
		return spec.DefaultTeam
	}
	return j.Team
}

func stamp(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

func stampPtr(t *time.Time) string {
	if t == nil {
		return ""
	}
	return stamp(*t)
}

// jobInfo describes j; base is the orchestrator's public URL ("" for paths).
func jobInfo(j store.Job, base string) *JobInfo {
	id := url.PathEscape(j.ID)
	return &JobInfo{ID: j.ID, ConfigName: j.ConfigName, SubmittedBy: j.SubmittedBy, Team: teamOf(j), Status: string(j.Status),
		Attempt: j.Attempt, WorkerID: j.WorkerID, Priority: j.Priority, RetriesUsed: j.RetriesUsed, MaxRetries: j.MaxRetries,
		CreatedAt: stamp(j.CreatedAt), StartedAt: stampPtr(j.StartedAt), EndedAt: stampPtr(j.EndedAt), Error: j.Error,
		Links: Links{Job: base + "/api/queue/" + id, Logs: base + "/api/queue/" + id + "/logs",
			Artifacts: base + "/api/queue/" + id + "/artifacts", Dashboard: base + "/ui/jobs/" + id}}
}

func workerInfo(w store.Worker) *WorkerInfo {
	return &WorkerInfo{ID: w.ID, Name: w.Name, Status: string(w.Status), LastHeartbeat: stampPtr(w.LastHeartbeat)}
}

// event makes the outbox event of p, keyed by key.
func event(p Payload, key, team string, at time.Time) store.OutboxEvent {
	p.ID, p.Time = NewEventID(), stamp(at)
	body, _ := json.Marshal(p) // plain fields always marshal
	return store.OutboxEvent{ID: p.ID, Type: p.Type, Key: key, Team: team, Time: at, Payload: body}
}

// JobKey and WorkerKey are the order keys: a subscription gets the events
// of one job, or of one worker and its GPUs, in order.
func JobKey(id string) string    { return "job:" + id }
func WorkerKey(id string) string { return "worker:" + id }

// CheckpointSaved is the event of a checkpoint a job kept (the Emitter's
// CheckpointKept): it joins the job's events, in order.
func CheckpointSaved(j store.Job, c CheckpointInfo, base string, at time.Time) store.OutboxEvent {
	return event(Payload{Type: spec.CheckpointSaved, Job: jobInfo(j, base), Checkpoint: &c}, JobKey(j.ID), teamOf(j), at)
}
