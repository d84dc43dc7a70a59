// Package api is the contract of simpletuner-orchestratord's admin and queue
// API: the JSON it writes and reads, declared once. The orchestrator encodes
// with these types; simpletunerctl and the dashboard decode with them, so a
// renamed field is a compile error on every side instead of a silent zero on
// one. The worker protocol (what workers and the orchestrator exchange) is
// package protocol's. Times are RFC 3339 strings in UTC, as on the wire.
package api

import (
	"encoding/json"
	"errors"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/audit"
	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
	"github.com/simpletuner/simpletuner-orchestration/internal/webhook/spec"
)

// Worker is a worker as GET /api/admin/workers shows it: upstream's fields
// plus the names SimpleTuner's guides use.
type Worker struct {
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
	// GPUTelemetry is the latest live GPU numbers the answering instance
	// received in the worker's heartbeats; null when none (protocol 1, no
	// GPUs, offline).
	GPUTelemetry *GPUTelemetry `json:"gpu_telemetry"`
	// ClockSkewSeconds is how far the worker's clock was ahead of the
	// instance's (negative: behind) at its last heartbeat there; null when
	// unknown. Informational: nothing depends on worker clocks.
	ClockSkewSeconds *float64 `json:"clock_skew_seconds"`
	// RunningJobs is how many attempts are out on the worker, MaxJobs how
	// many it may run at once, GPUsFree how many of its GPUs none holds and
	// the worker does not keep out of use.
	RunningJobs int `json:"running_jobs"`
	MaxJobs     int `json:"max_jobs"`
	GPUsFree    int `json:"gpus_free"`
	// GPUConditions are the GPUs the worker keeps out of use: held back
	// (something was left on them) or unhealthy (a hardware fault).
	GPUConditions []GPUCondition `json:"gpu_conditions"`
	// Jobs are the attempts out on the worker with the GPUs each holds, by
	// index (GET /api/admin/workers/{id} only; a job that took the whole
	// worker lists no GPUs).
	Jobs []WorkerJob `json:"jobs,omitempty"`
}

// WorkerJob is one attempt out on a worker and the GPUs it holds.
type WorkerJob struct {
	JobID   string `json:"job_id"`
	Attempt int    `json:"attempt"`
	GPUs    []int  `json:"gpus"`
}

// GPUTelemetry is a worker's latest live GPU numbers, as of At.
type GPUTelemetry struct {
	At   string                  `json:"at"`
	GPUs []protocol.GPUTelemetry `json:"gpus"`
}

// GPUCondition is a GPU a worker keeps out of use; Clearing is set once an
// admin cleared a fence the worker still reports.
type GPUCondition struct {
	protocol.GPUCondition
	Clearing bool `json:"clearing,omitempty"`
}

// WorkerList is GET /api/admin/workers.
type WorkerList struct {
	Workers []Worker `json:"workers"`
	Total   int      `json:"total"`
}

// CreateWorker is POST /api/admin/workers. WorkerType is persistent or
// ephemeral ("" the orchestrator's default); LabelsLocked pins the worker's
// labels to the admin's and its GPU inventory to the first one it reports,
// so what a stolen token reports cannot draw jobs (and their secrets) meant
// for others. Unset means locked: only an explicit false trusts the worker.
type CreateWorker struct {
	Name         *string             `json:"name"`
	WorkerType   protocol.WorkerType `json:"worker_type,omitempty"`
	Labels       map[string]string   `json:"labels,omitempty"`
	LabelsLocked *bool               `json:"labels_locked,omitempty"`
}

// Locked is whether the worker is to be created locked (see LabelsLocked).
func (c CreateWorker) Locked() bool { return c.LabelsLocked == nil || *c.LabelsLocked }

// PatchWorker is PATCH /api/admin/workers/{id}. Labels follow JSON
// merge-patch: the keys given are added or replaced, a key given as null is
// removed, the others stay.
type PatchWorker struct {
	Name         *string             `json:"name,omitempty"`
	Labels       map[string]*string  `json:"labels,omitempty"`
	LabelsLocked *bool               `json:"labels_locked,omitempty"`
	WorkerType   protocol.WorkerType `json:"worker_type,omitempty"`
}

// WorkerCreated answers CreateWorker: the token is shown only here.
type WorkerCreated struct {
	WorkerID          string            `json:"worker_id"`
	ID                string            `json:"id"`
	Name              string            `json:"name"`
	WorkerType        string            `json:"worker_type"`
	Labels            map[string]string `json:"labels"`
	LabelsLocked      bool              `json:"labels_locked"`
	Token             string            `json:"token"`
	ConnectionCommand string            `json:"connection_command"`
}

// WorkerToken answers POST /api/admin/workers/{id}/token: the new token,
// shown only here.
type WorkerToken struct {
	WorkerID          string `json:"worker_id"`
	Token             string `json:"token"`
	ConnectionCommand string `json:"connection_command"`
}

// WorkerAction answers a drain, resume, delete or GPU clear: the worker's
// status afterwards (the GPU's, for a clear).
type WorkerAction struct {
	Success  bool   `json:"success"`
	WorkerID string `json:"worker_id"`
	Status   string `json:"status,omitempty"`
	GPU      *int   `json:"gpu,omitempty"`
}

// Job is a job as the queue API shows it. Secrets (hf_token, upload
// tokens) are never part of it.
type Job struct {
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
	// Team is the submitting token's team, whose share and limits the job
	// counts against.
	Team        string          `json:"team"`
	QueuedAt    string          `json:"queued_at"`
	UpdatedAt   string          `json:"updated_at"`
	StartedAt   *string         `json:"started_at"`
	CompletedAt *string         `json:"completed_at"`
	Config      json.RawMessage `json:"config,omitempty"`
	Attempts    []Attempt       `json:"attempts,omitempty"`
	// WaitingReason and WaitingDetail say why a queued or waiting job has
	// not started (GET /api/queue/{id}, and lists asked with waiting=1).
	WaitingReason string `json:"waiting_reason,omitempty"`
	WaitingDetail string `json:"waiting_detail,omitempty"`
	// DependsOn are the jobs this one waits or waited for (GET
	// /api/queue/{id} only); OnUnmet is "hold" when it keeps waiting on
	// one that can never be met.
	DependsOn []DependencyView `json:"depends_on,omitempty"`
	OnUnmet   string           `json:"on_unmet,omitempty"`
	// Checkpoints is false for a job submitted with checkpoints off.
	Checkpoints bool `json:"checkpoints"`
	// Checkpoint is the newest complete checkpoint kept in the job's
	// artifacts, a retry's starting point, and CheckpointsKept how many are
	// kept (GET /api/queue/{id} only).
	Checkpoint      *protocol.Checkpoint `json:"checkpoint,omitempty"`
	CheckpointsKept int                  `json:"checkpoints_kept,omitempty"`
}

// Terminal reports whether the job can no longer change.
func (j Job) Terminal() bool { return protocol.JobStatus(j.Status).Terminal() }

// Attempt is one dispatch of a job.
type Attempt struct {
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

// JobList is GET /api/queue: a page of jobs. Next continues the list
// (?cursor=); Total is absent for a list by worker.
type JobList struct {
	Entries      []Job   `json:"entries"`
	Order        string  `json:"order"`
	Next         *string `json:"next,omitempty"`
	Total        *int    `json:"total,omitempty"`
	TotalPending int     `json:"total_pending"`
	TotalRunning int     `json:"total_running"`
}

// Submit is POST /api/queue/submit. Pointer fields are optional: nil leaves
// the orchestrator's default (for GPUCount: the config's process count, else
// the whole worker).
type Submit struct {
	ConfigName     *string           `json:"config_name,omitempty"`
	Config         json.RawMessage   `json:"config,omitempty"`
	Dataloader     json.RawMessage   `json:"dataloader,omitempty"`
	HFToken        string            `json:"hf_token,omitempty"`
	Target         protocol.Target   `json:"target,omitempty"`
	WorkerLabels   map[string]string `json:"worker_labels,omitempty"`
	GPUCount       *int              `json:"gpu_count,omitempty"`
	MinVRAMGB      *float64          `json:"min_vram_gb,omitempty"`
	Priority       *int              `json:"priority,omitempty"`
	MaxRetries     *int              `json:"max_retries,omitempty"`
	TimeoutSeconds *int              `json:"timeout_seconds,omitempty"`
	// Checkpoints false keeps none of the job's checkpoints in its
	// artifacts, and its retries start afresh.
	Checkpoints *bool `json:"checkpoints,omitempty"`
	// DependsOn are jobs this one waits for (status waiting) before it
	// joins the queue. OnUnmet says what happens when one of them ends in
	// a way that can never meet its condition: "cancel" (the default) ends
	// this job cancelled, "hold" keeps it waiting until someone cancels it.
	DependsOn []Dependency `json:"depends_on,omitempty"`
	OnUnmet   string       `json:"on_unmet,omitempty"`
}

// Dependency is a job another waits for, and how it must end: "ok" (it
// completed, the default), "failed" or "any".
type Dependency struct {
	JobID string `json:"job_id"`
	When  string `json:"when,omitempty"`
}

// DependencyView is a dependency as GET /api/queue/{id} shows it: its
// state is "pending" until the job depended on ends, then "met" or "unmet";
// status is that job's now ("" once retention deleted it).
type DependencyView struct {
	JobID  string `json:"job_id"`
	When   string `json:"when"`
	State  string `json:"state"`
	Status string `json:"status"`
}

// Submitted answers Submit: what GPUs the job gets, where it is in the
// queue, and warnings (fields not understood, a job no worker can run yet).
type Submitted struct {
	Success       bool     `json:"success"`
	JobID         string   `json:"job_id"`
	Status        string   `json:"status"`
	QueuePosition int      `json:"queue_position"`
	GPUCount      *int     `json:"gpu_count"`
	WholeWorker   bool     `json:"whole_worker"`
	GPUAllocation string   `json:"gpu_allocation"`
	Warning       string   `json:"warning,omitempty"`
	Warnings      []string `json:"warnings,omitempty"`
	// RequiresApproval: an approval rule held the job (status
	// pending_approval); Approval says which and why.
	RequiresApproval bool            `json:"requires_approval,omitempty"`
	Approval         *SubmitApproval `json:"approval,omitempty"`
}

// JobAction answers a cancel: the job's status afterwards.
type JobAction struct {
	Success bool   `json:"success"`
	JobID   string `json:"job_id"`
	Status  string `json:"status"`
}

// Stats is GET /api/queue/stats.
type Stats struct {
	QueueDepth int            `json:"queue_depth"`
	Running    int            `json:"running"`
	ByStatus   map[string]int `json:"by_status"`
	// Workers counts the workers by status, and in all ("total").
	Workers map[string]int `json:"workers"`
	GPUs    []GPUModel     `json:"gpus"`
	// Last24h counts the jobs that ended in the last 24 hours by status.
	Last24h map[string]int `json:"last_24h"`
}

// GPUModel is the fleet's GPUs of one model and memory size.
type GPUModel struct {
	Model   string  `json:"model"`
	VRAMGB  float64 `json:"vram_gb"`
	Total   int     `json:"total"`
	InUse   int     `json:"in_use"`
	Offline int     `json:"offline"`
}

// GPUHistory is GET /api/admin/workers/{id}/gpu-history: the worker's GPUs
// over the last hours, a point per StepSeconds from Start, oldest first.
type GPUHistory struct {
	StepSeconds int         `json:"step_seconds"`
	Start       string      `json:"start"`
	GPUs        []GPUSeries `json:"gpus"`
}

// GPUSeries is one GPU's points, null where no heartbeat brought numbers.
type GPUSeries struct {
	Index          int        `json:"index"`
	UUID           string     `json:"uuid"`
	UtilizationPct []*float64 `json:"utilization_pct"`
	MemoryUsedPct  []*float64 `json:"memory_used_pct"`
}

// FleetHistory is GET /api/admin/fleet/gpu-history: the GPUs attempts held
// (InUse), those the queued jobs asked for (Asked; a whole-worker job counts
// as the largest worker's GPUs) and those of the workers taking work
// (Online).
type FleetHistory struct {
	StepSeconds int        `json:"step_seconds"`
	Start       string     `json:"start"`
	InUse       []*float64 `json:"in_use"`
	Asked       []*float64 `json:"asked"`
	Online      []*float64 `json:"online"`
}

// Token is an admin token as GET /api/admin/tokens lists it.
type Token struct {
	ID     string   `json:"id"`
	Name   string   `json:"name"`
	Scopes []string `json:"scopes"`
	// Team is the team the token's jobs belong to ("default" when none
	// was given).
	Team string `json:"team"`
	// MaxPriority is the highest priority the token was granted for its
	// jobs; null: its team's max_priority.
	MaxPriority *int    `json:"max_priority"`
	CreatedAt   string  `json:"created_at"`
	RevokedAt   *string `json:"revoked_at"`
	// PersonID is the person a person's token belongs to ("" for a
	// service token); ExpiresAt is when it stops working (null: never).
	PersonID  string  `json:"person_id,omitempty"`
	ExpiresAt *string `json:"expires_at"`
}

// TokenList is GET /api/admin/tokens.
type TokenList struct {
	Tokens []Token `json:"tokens"`
}

// CreateToken is POST /api/admin/tokens.
type CreateToken struct {
	Name   string   `json:"name"`
	Scopes []string `json:"scopes"`
	// Team must be a team of [[teams]] (or "default"); empty is "default".
	Team string `json:"team,omitempty"`
	// MaxPriority grants the token's jobs priorities up to it (0 to 50), in
	// place of its team's max_priority; not for a token with scope "*".
	MaxPriority *int `json:"max_priority,omitempty"`
}

// TokenCreated answers CreateToken: the token is shown only here.
type TokenCreated struct {
	ID     string   `json:"id"`
	Name   string   `json:"name"`
	Scopes []string `json:"scopes"`
	Team   string   `json:"team"`
	// MaxPriority is the grant given, null when the team's applies.
	MaxPriority *int   `json:"max_priority"`
	Token       string `json:"token"`
}

// Revoked answers DELETE /api/admin/tokens/{id}.
type Revoked struct {
	Success bool   `json:"success"`
	ID      string `json:"id"`
}

// AuditQuery narrows GET /api/admin/audit. Without Newest, records after
// Since, oldest first; with it, records before Before (0: from the newest),
// newest first, matching Actor (exact), Action (exact, or a prefix ending in
// ".") and Target. Limit 0 is the default page.
type AuditQuery struct {
	Newest bool
	Since  int64
	Before int64
	Actor  string
	Action string
	Target string
	Limit  int
}

// AuditPage is GET /api/admin/audit: a page of records. Next continues the
// list (?cursor=); Checkpoint is the last record retention deleted.
type AuditPage struct {
	Records    []audit.Record `json:"records"`
	Count      int            `json:"count"`
	Next       *string        `json:"next,omitempty"`
	Checkpoint *AuditLink     `json:"checkpoint,omitempty"`
}

// AuditLink names an audit record by its place in the chain.
type AuditLink struct {
	Seq  int64     `json:"seq"`
	Hash string    `json:"hash"`
	Time time.Time `json:"time,omitzero"`
}

// AuditVerdict is GET /api/admin/audit/verify: whether every record from
// the checkpoint to the head matches its content and links to the one
// before, and where the chain breaks when it does. Checked, HeadSeq and
// BrokenAt say the same in the dashboard's terms.
type AuditVerdict struct {
	OK         bool      `json:"ok"`
	Records    int64     `json:"records"`
	FirstSeq   int64     `json:"first_seq,omitempty"`
	LastSeq    int64     `json:"last_seq,omitempty"`
	LastHash   string    `json:"last_hash,omitempty"`
	Checkpoint AuditLink `json:"checkpoint"`
	Head       AuditLink `json:"head"`
	Error      string    `json:"error,omitempty"`
	Checked    int64     `json:"checked"`
	HeadSeq    int64     `json:"head_seq"`
	BrokenAt   int64     `json:"broken_at,omitempty"`
}

// Whoami is GET /api/auth/whoami: the caller.
type Whoami struct {
	Kind   string   `json:"kind"`
	ID     string   `json:"id"`
	Name   string   `json:"name"`
	Scopes []string `json:"scopes"`
	Actor  string   `json:"actor"`
	Team   string   `json:"team"`
	// MaxPriority is the highest priority the caller may give a job: its
	// token's grant, else its team's max_priority; 50 with scope "*".
	MaxPriority int `json:"max_priority"`
	// Person is who a person's token stands for; null for a service token
	// and the admin socket.
	Person *PersonSummary `json:"person"`
	// Memberships are a person's roles now, one per team; [] otherwise.
	Memberships []Membership `json:"memberships"`
	// TokenID is the admin token presented ("" on the admin socket), and
	// ExpiresAt when it stops working (null: never).
	TokenID   string  `json:"token_id"`
	ExpiresAt *string `json:"expires_at"`
}

// PersonSummary names a person.
type PersonSummary struct {
	ID       string `json:"id"`
	Username string `json:"username"`
	Name     string `json:"name"`
	Email    string `json:"email"`
	Provider string `json:"provider"`
}

// UsageQuery asks GET /api/admin/usage for the GPU-hours of the days
// From..To (YYYY-MM-DD, UTC, both included); empty To is today, empty
// From is 6 days before To.
type UsageQuery struct {
	From, To string
}

// Usage is GET /api/admin/usage: each team's share of the fleet, its
// limits, what it holds and queues now, its decayed usage and fair-share
// factor (what placement orders by), and its GPU-hours per day.
type Usage struct {
	// HalfLifeSeconds is [jobs] usage_half_life: usage that old counts half.
	HalfLifeSeconds float64 `json:"half_life_seconds"`
	// FleetGPUs is how many GPUs the registered workers report.
	FleetGPUs int    `json:"fleet_gpus"`
	From      string `json:"from"`
	To        string `json:"to"`
	// Preemption is whether [jobs] preemption is on.
	Preemption bool        `json:"preemption"`
	Teams      []TeamUsage `json:"teams"`
}

// TeamUsage is one team of Usage.
type TeamUsage struct {
	Team string `json:"team"`
	// Share is the team's configured share and ShareFraction its part of
	// all the shares: the part of the fleet's GPUs it is entitled to.
	Share         float64 `json:"share"`
	ShareFraction float64 `json:"share_fraction"`
	// MaxGPUs and MaxQueued are its limits (0: none); Borrow lets it run
	// beyond MaxGPUs on GPUs nobody else waits for.
	MaxGPUs   int  `json:"max_gpus"`
	MaxQueued int  `json:"max_queued"`
	Borrow    bool `json:"borrow"`
	// Configured is false for a team that has jobs but is no longer in
	// [[teams]]: it is scheduled with a share of 1 until its jobs end.
	Configured  bool `json:"configured"`
	RunningJobs int  `json:"running_jobs"`
	RunningGPUs int  `json:"running_gpus"`
	QueuedJobs  int  `json:"queued_jobs"`
	// DecayedGPUHours is its usage with the half-life applied (running
	// attempts included), UsageFraction its part of every team's, and
	// FairShare the factor 2^(-usage fraction / share fraction): 1 for a
	// team that used nothing, 0.5 for one that used exactly its share.
	DecayedGPUHours float64 `json:"decayed_gpu_hours"`
	UsageFraction   float64 `json:"usage_fraction"`
	FairShare       float64 `json:"fair_share"`
	// GPUHours is the sum of Days.
	GPUHours float64    `json:"gpu_hours"`
	Days     []UsageDay `json:"days"`
}

// UsageDay is a team's GPU-hours on one day (UTC): ended attempts, and
// the part of running ones up to now.
type UsageDay struct {
	Day      string  `json:"day"`
	GPUHours float64 `json:"gpu_hours"`
}

// ConfigList is GET /api/configs: the config names a submit can use.
type ConfigList struct {
	Configs   []string `json:"configs"`
	Truncated bool     `json:"truncated"`
}

// JobArtifacts is GET /api/queue/{id}/artifacts.
type JobArtifacts struct {
	JobID      string     `json:"job_id"`
	TotalBytes int64      `json:"total_bytes"`
	Artifacts  []Artifact `json:"artifacts"`
}

// ArtifactSHA256Header carries an artifact's SHA-256 (hex) in a download's
// answer.
const ArtifactSHA256Header = "X-Artifact-Sha256"

// Artifact is one file a job's attempt stored.
type Artifact struct {
	Path       string `json:"path"`
	Attempt    int    `json:"attempt"`
	Size       int64  `json:"size"`
	ModifiedAt string `json:"modified_at"`
	MD5        string `json:"md5,omitempty"`
	SHA256     string `json:"sha256,omitempty"`
}

// ArtifactsQuery names a job's artifacts: every attempt's (Attempt 0),
// newest attempt first, or one attempt's.
type ArtifactsQuery struct {
	JobID   string
	Attempt int
}

// Error is a refusal or failure of an API call: an HTTP status and the
// protocol's JSON error body ({"detail", "error"}).
type Error struct {
	Status int
	Body   protocol.ErrorBody
	// RetryAfter is when a refused caller may try again (429, 503).
	RetryAfter time.Duration
}

func (e *Error) Error() string { return e.Body.Detail }

// WebhookList is GET /api/admin/webhooks: the subscriptions, and every
// event one can subscribe to.
type WebhookList struct {
	Webhooks []spec.Subscription `json:"webhooks"`
	Events   []string            `json:"events"`
}

// WebhookRef names a subscription by id or name.
type WebhookRef struct{ ID string }

// WebhookDeleted answers DELETE /api/admin/webhooks/{id}.
type WebhookDeleted struct {
	Success bool   `json:"success"`
	ID      string `json:"id"`
	Name    string `json:"name"`
}

// DeliveriesQuery narrows a subscription's delivery log: a State (pending,
// delivered, failed; "" any), the page before delivery Before (0: the
// newest), Limit per page (0: 50), with the events' bodies when Payload.
type DeliveriesQuery struct {
	ID      string
	State   string
	Before  int64
	Limit   int
	Payload bool
}

// DeliveryPage is GET /api/admin/webhooks/{id}/deliveries, newest first;
// Next continues it (?before=).
type DeliveryPage struct {
	Deliveries []spec.Delivery `json:"deliveries"`
	Count      int             `json:"count"`
	Next       string          `json:"next,omitempty"`
}

// ErrorOf is the *Error in err's chain, nil when there is none.
func ErrorOf(err error) *Error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	return nil
}

// WorkersQuery narrows GET /api/admin/workers: a status ("" any), a page.
type WorkersQuery struct {
	Status string
	Limit  int
	Offset int
}

// WorkerRef names a worker: its id (and, for a GPU clear, the GPU's index;
// for a delete, whether to force it).
type WorkerRef struct {
	ID    string
	GPU   int
	Force bool
}

// JobsQuery narrows GET /api/queue: Status is a job status, pending
// (queued) or active ("" any); WorkerID keeps the jobs whose current or last
// attempt is on that worker; Order is newest (default) or oldest; Cursor
// continues a list (a reply's Next), Offset skips jobs the slow way; Waiting
// explains each queued job's wait. Limit 0 is the default page.
type JobsQuery struct {
	Status   string
	WorkerID string
	Order    string
	Limit    int
	Offset   int
	Cursor   string
	Waiting  bool
}

// JobRef names a job.
type JobRef struct{ ID string }
