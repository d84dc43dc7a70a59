// Package protocol holds the wire types spoken between simpletuner-orchestratord
// and its workers; docs/protocol.md describes every endpoint, event and error.
// Protocol 1 is SimpleTuner's own Python agent, protocol 2 is
// simpletuner-workerd (a superset). Fields marked ext are only sent to, or
// expected from, protocol-2 peers.
package protocol

import (
	"crypto/rand"
	"encoding/base32"
	"encoding/json"
	"strings"
	"time"
)

// Version is the protocol number simpletuner-workerd announces at registration.
const Version = 2

// WorkerStatus is the orchestrator's view of a worker.
type WorkerStatus string

const (
	WorkerConnecting WorkerStatus = "connecting"
	WorkerIdle       WorkerStatus = "idle"
	WorkerPartial    WorkerStatus = "partial" // running attempts, with room for more
	WorkerBusy       WorkerStatus = "busy"
	WorkerDraining   WorkerStatus = "draining"
	WorkerOffline    WorkerStatus = "offline"
	// WorkerDisconnected is shown, never stored: the store still has the
	// worker idle, busy or draining, but it holds no stream and missed its
	// last heartbeat. It becomes offline at the heartbeat timeout.
	WorkerDisconnected WorkerStatus = "disconnected"
)

// Valid reports whether s is one of the known worker statuses.
func (s WorkerStatus) Valid() bool {
	switch s {
	case WorkerConnecting, WorkerIdle, WorkerPartial, WorkerBusy, WorkerDraining, WorkerOffline:
		return true
	}
	return false
}

// WorkerType decides what happens to a worker between jobs.
type WorkerType string

const (
	Persistent WorkerType = "persistent"
	Ephemeral  WorkerType = "ephemeral"
)

// Valid reports whether t is persistent or ephemeral.
func (t WorkerType) Valid() bool { return t == Persistent || t == Ephemeral }

// JobStatus is the state of a job in the queue.
type JobStatus string

const (
	// JobPendingApproval: an approval rule held the job at submit; a lead
	// of its team (or an admin) approves it into the queue or rejects it.
	JobPendingApproval JobStatus = "pending_approval"
	// JobWaiting: the job waits for the jobs it depends on to end; it
	// joins the queue when every dependency ended the way it asked.
	JobWaiting    JobStatus = "waiting"
	JobQueued     JobStatus = "queued"
	JobDispatched JobStatus = "dispatched"
	JobRunning    JobStatus = "running"
	JobCanceling  JobStatus = "canceling"
	JobCompleted  JobStatus = "completed"
	JobFailed     JobStatus = "failed"
	JobCancelled  JobStatus = "cancelled"
)

// Terminal reports whether a job in this state can never change again.
func (s JobStatus) Terminal() bool {
	return s == JobCompleted || s == JobFailed || s == JobCancelled
}

// Active reports whether an attempt of the job is assigned to a worker.
func (s JobStatus) Active() bool {
	return s == JobDispatched || s == JobRunning || s == JobCanceling
}

// ActiveJobStatuses lists the states in which an attempt is out on a worker
// (a fresh slice each call).
func ActiveJobStatuses() []JobStatus { return []JobStatus{JobDispatched, JobRunning, JobCanceling} }

// Valid reports whether s is a known job status.
func (s JobStatus) Valid() bool {
	return s == JobPendingApproval || s == JobWaiting || s == JobQueued || s.Active() || s.Terminal()
}

// AttemptOutcome records how one dispatch of a job ended.
type AttemptOutcome string

const (
	OutcomeCompleted  AttemptOutcome = "completed"
	OutcomeFailed     AttemptOutcome = "failed"
	OutcomeWorkerLost AttemptOutcome = "worker_lost"
	OutcomeCancelled  AttemptOutcome = "cancelled"
	OutcomeWithdrawn  AttemptOutcome = "withdrawn"
	OutcomeTimeout    AttemptOutcome = "timeout"
	// OutcomeGPUFault: the worker stopped the attempt because one of its
	// GPUs failed; the job is requeued without spending a retry.
	OutcomeGPUFault AttemptOutcome = "gpu_fault"
	// OutcomePreempted: the scheduler stopped the attempt to give its GPUs
	// to another team's job (or one of higher priority); the job was
	// requeued without spending a retry.
	OutcomePreempted AttemptOutcome = "preempted"
)

// Statuses a worker may report on POST /api/workers/job/{id}/status.
const (
	ReportStarting  = "starting"
	ReportTraining  = "training"
	ReportRunning   = "running"
	ReportCompleted = "completed"
	ReportFailed    = "failed"
	ReportCancelled = "cancelled"
)

// Target selects which workers may run a job.
type Target string

const (
	TargetWorker Target = "worker"
	TargetLocal  Target = "local"
	TargetAuto   Target = "auto"
)

// Valid reports whether t is worker, local or auto.
func (t Target) Valid() bool { return t == TargetWorker || t == TargetLocal || t == TargetAuto }

// GPUInfo is what a worker reports about its accelerators. Upstream's agent sends
// name/vram_gb/count/accelerator; SimpleTuner's guides name them gpu_name/
// gpu_vram_gb/gpu_count/accelerator_type. Both spellings are accepted and the
// guides' are derived for responses.
type GPUInfo struct {
	Name        string      `json:"name,omitempty"`
	VRAMGB      *float64    `json:"vram_gb"`
	Count       int         `json:"count"`
	Driver      string      `json:"driver,omitempty"`
	Accelerator string      `json:"accelerator,omitempty"`
	CUDAVersion string      `json:"cuda_version,omitempty"`
	Devices     []GPUDevice `json:"devices,omitempty"`
}

// GPUDevice describes one GPU (protocol 2).
type GPUDevice struct {
	Index     int    `json:"index"`
	UUID      string `json:"uuid"`
	Name      string `json:"name"`
	MemoryMiB uint64 `json:"memory_mib"`
}

// RunningAttempt names an attempt a protocol-2 worker still answers for: one
// whose process runs, or one whose process ended but whose terminal report the
// orchestrator has not acknowledged yet (State "finishing", Outcome the status
// the report carries). A finishing attempt is listed until its report is
// acknowledged, so that an attempt is never absent from a heartbeat while its
// outcome is still on the way.
type RunningAttempt struct {
	JobID   string `json:"job_id"`
	Attempt int    `json:"attempt"`
	State   string `json:"state,omitempty"`   // "" or AttemptRunning while the process runs; AttemptFinishing after
	Outcome string `json:"outcome,omitempty"` // finishing: completed, failed or cancelled
}

// States of a RunningAttempt.
const (
	AttemptRunning   = "running"
	AttemptFinishing = "finishing"
)

// Finishing reports whether the attempt's process has ended and only its
// report is outstanding.
func (r RunningAttempt) Finishing() bool { return r.State == AttemptFinishing }

// RegisterRequest is the body of POST /api/workers/register.
type RegisterRequest struct {
	Name         string            `json:"name"`
	GPUInfo      json.RawMessage   `json:"gpu_info,omitempty"`
	Persistent   bool              `json:"persistent"`
	Provider     *string           `json:"provider,omitempty"`
	Labels       map[string]string `json:"labels,omitempty"`
	CurrentJobID *string           `json:"current_job_id,omitempty"`
	// ext
	Protocol     int              `json:"protocol,omitempty"`
	Version      string           `json:"version,omitempty"`
	Running      []RunningAttempt `json:"running,omitempty"`
	Capabilities *Capabilities    `json:"capabilities,omitempty"`
	// GPUConditions are the GPUs the worker keeps out of use; nil when the
	// worker does not say (protocol 1), an empty list when none.
	GPUConditions *[]GPUCondition `json:"gpu_conditions,omitempty"`
}

// Capabilities is what a protocol-2 worker tells about itself when it
// registers; the orchestrator stores it and shows it in the worker list.
type Capabilities struct {
	// Isolation is how the worker walls jobs off: "cgroup" or
	// "process-group", with "+uid" when each job runs as a uid of its own
	// (or "+user" when all share the job user).
	Isolation string `json:"isolation,omitempty"`
	// CancelGraceSeconds is the worker's own SIGTERM → SIGKILL grace, set
	// when its admin configured one: it overrides the orchestrator's for jobs
	// on that worker. 0 means the orchestrator's grace applies.
	CancelGraceSeconds float64 `json:"cancel_grace_seconds,omitempty"`
	// MaxJobs is how many jobs the worker runs at once, each on GPUs of its
	// own that the orchestrator assigns (job_submit's gpus). 0: a worker that
	// runs one job at a time with all its GPUs.
	MaxJobs int `json:"max_jobs,omitempty"`
	// OwnType: the worker's configuration sets its type (persistent). Without
	// it, the worker takes the type an admin gave it from the registration
	// reply, so the persistent it sends is no claim of its own.
	OwnType bool `json:"own_type,omitempty"`
}

// ResumeJob tells a protocol-1 agent to keep the job it reported.
type ResumeJob struct {
	JobID      string `json:"job_id"`
	ConfigName string `json:"config_name"`
	Status     string `json:"status"`
	Attempt    int    `json:"attempt,omitempty"`
}

// RegisterResponse answers POST /api/workers/register.
type RegisterResponse struct {
	WorkerID   string     `json:"worker_id"`
	SSEURL     string     `json:"sse_url"`
	ResumeJob  *ResumeJob `json:"resume_job"`
	AbandonJob *string    `json:"abandon_job"`
	// ext (omitted for protocol 1)
	Protocol                 int     `json:"protocol,omitempty"`
	HeartbeatIntervalSeconds float64 `json:"heartbeat_interval_seconds,omitempty"`
	HeartbeatTimeoutSeconds  float64 `json:"heartbeat_timeout_seconds,omitempty"`
	// PingIntervalSeconds is how often the stream carries a keep-alive when
	// nothing else is sent: a worker that hears nothing for three of them
	// takes the stream for dead, whatever the network still pretends.
	PingIntervalSeconds float64          `json:"ping_interval_seconds,omitempty"`
	Resume              []RunningAttempt `json:"resume,omitempty"`
	Abandon             []RunningAttempt `json:"abandon,omitempty"`
	// WorkerType is the type an admin gave the worker; a worker whose own
	// configuration does not set one adopts it.
	WorkerType WorkerType `json:"worker_type,omitempty"`
}

// GPUTelemetry is one GPU's live numbers in a protocol-2 heartbeat.
type GPUTelemetry struct {
	Index          int     `json:"index"`
	UUID           string  `json:"uuid"`
	UtilizationPct float64 `json:"utilization_pct"`
	MemoryUsedMiB  uint64  `json:"memory_used_mib"`
	MemoryTotalMiB uint64  `json:"memory_total_mib,omitempty"`
	TemperatureC   float64 `json:"temperature_c"`
	PowerW         float64 `json:"power_w,omitempty"`
	// Health is "ok", or the GPU's condition ("held: …", "unhealthy: …"),
	// or a hardware slowdown in force ("slowdown: thermal").
	Health string `json:"health,omitempty"`
}

// GPUCondition is a GPU a protocol-2 worker keeps out of use:
//
//   - held: a job left a process on it. The worker checks it again and
//     releases it by itself once nothing is left.
//   - unhealthy: the GPU had a hardware fault (an XID the driver raises for
//     hardware, uncorrectable ECC errors, a row-remapping failure, lost from
//     the bus). It stays fenced until an admin clears it.
//
// The orchestrator places no job on such a GPU.
type GPUCondition struct {
	Index  int    `json:"index"`
	UUID   string `json:"uuid,omitempty"`
	State  string `json:"state"`
	Reason string `json:"reason"`
	Since  string `json:"since"` // RFC 3339
}

// States of a GPUCondition.
const (
	GPUHeld      = "held"
	GPUUnhealthy = "unhealthy"
)

// GPUFault, with a terminal report, says the attempt was stopped because one
// of its GPUs failed: the machine failed, not the job, so the job is
// requeued without spending a retry.
type GPUFault struct {
	GPUs   []int  `json:"gpus"`
	Reason string `json:"reason"`
}

// HeartbeatRequest is the body of POST /api/workers/heartbeat.
type HeartbeatRequest struct {
	WorkerID     string  `json:"worker_id"`
	Status       string  `json:"status"`
	CurrentJobID *string `json:"current_job_id,omitempty"`
	// ext
	GPUs    []GPUTelemetry   `json:"gpus,omitempty"`
	Running []RunningAttempt `json:"running,omitempty"`
	// SentAt is the worker's wall clock when it sent the heartbeat (RFC 3339).
	// The orchestrator only reports the difference to its own clock.
	SentAt string `json:"sent_at,omitempty"`
	// GPUConditions: as at registration.
	GPUConditions *[]GPUCondition `json:"gpu_conditions,omitempty"`
}

// HeartbeatResponse answers a heartbeat; Cancel and Drain repeat what the stream
// said so that a missed SSE event still arrives.
type HeartbeatResponse struct {
	Success bool     `json:"success"`
	Cancel  []string `json:"cancel,omitempty"`
	Drain   bool     `json:"drain,omitempty"`
	// ClearGPUs names the unhealthy GPUs (by index) an admin cleared, until
	// the worker no longer reports them.
	ClearGPUs []int `json:"clear_gpus,omitempty"`
}

// StatusReport is the body of POST /api/workers/job/{job_id}/status.
type StatusReport struct {
	Status   string          `json:"status"`
	Error    *string         `json:"error,omitempty"`
	Progress json.RawMessage `json:"progress,omitempty"`
	Attempt  *int            `json:"attempt,omitempty"` // ext
	// Usage (ext) comes with a terminal report: what the attempt's processes used.
	Usage *Usage `json:"usage,omitempty"`
	// Fault (ext) comes with a failed report of an attempt stopped because
	// one of its GPUs failed.
	Fault *GPUFault `json:"fault,omitempty"`
	// Shutdown (ext) comes with a cancelled report of an attempt the worker
	// stopped because it was itself stopped on purpose: a second stop
	// signal, the end of worker.drain_timeout after the first, or the
	// orchestrator's shutdown event. Nothing the job did caused it, so the
	// orchestrator requeues the job without spending a retry.
	Shutdown bool `json:"shutdown,omitempty"`
	// GPUConditions (ext, terminal reports): the worker's GPU conditions as
	// the attempt ends, so that a GPU it left dirty is held back before it is
	// freed.
	GPUConditions *[]GPUCondition `json:"gpu_conditions,omitempty"`
}

// Usage is what an attempt's processes used: CPU time of all of them, and the
// peak memory of the job's cgroup (or of its leader where there is none); for
// its GPUs, GPU-seconds (GPUs held × wall time), the peak GPU memory of its
// processes, the mean utilisation of its GPUs while it ran (nil when not
// measured) and the GPU errors the driver raised that are the job's own.
type Usage struct {
	CPUSeconds         float64  `json:"cpu_seconds"`
	PeakMemoryBytes    uint64   `json:"peak_memory_bytes"`
	GPUSeconds         float64  `json:"gpu_seconds,omitempty"`
	PeakGPUMemoryBytes uint64   `json:"peak_gpu_memory_bytes,omitempty"`
	GPUUtilizationPct  *float64 `json:"gpu_utilization_pct,omitempty"`
	GPUEvents          []string `json:"gpu_events,omitempty"`
}

// DisconnectRequest is the body of POST /api/workers/disconnect.
type DisconnectRequest struct {
	WorkerID string `json:"worker_id"`
}

// QueueCheckResponse answers GET /api/workers/queue.
type QueueCheckResponse struct {
	HasJobs bool `json:"has_jobs"`
}

// SSE event types.
const (
	EventJobSubmit = "job_submit"
	EventJobCancel = "job_cancel"
	EventDrain     = "drain"
	EventShutdown  = "shutdown"
	EventPing      = "ping"
	EventGPUClear  = "gpu_clear"
)

// GPUClearEvent tells a worker that an admin cleared the fence of its
// unhealthy GPUs (by index).
type GPUClearEvent struct {
	Type string `json:"type"`
	GPUs []int  `json:"gpus"`
}

// JobSubmitEvent is sent on a worker's stream to start an attempt.
type JobSubmitEvent struct {
	Type           string          `json:"type"`
	JobID          string          `json:"job_id"`
	Config         json.RawMessage `json:"config"`
	Dataloader     json.RawMessage `json:"dataloader,omitempty"`
	Provider       string          `json:"provider"`
	UploadEndpoint string          `json:"upload_endpoint"`
	UploadToken    string          `json:"upload_token"`
	HFToken        string          `json:"hf_token,omitempty"`
	// ext
	Attempt            int     `json:"attempt"`
	ConfigName         string  `json:"config_name,omitempty"`
	TimeoutSeconds     float64 `json:"timeout_seconds,omitempty"`
	CancelGraceSeconds float64 `json:"cancel_grace_seconds,omitempty"`
	LogEndpoint        string  `json:"log_endpoint,omitempty"`
	// GPUs are the worker's GPUs this attempt may use, for a worker that
	// runs several jobs at once (capabilities.max_jobs); an empty list is a
	// job that takes no GPU. Absent (nil): the whole worker, every GPU of
	// it, with no other job beside it.
	GPUs *[]AssignedGPU `json:"gpus,omitempty"`
	// WholeWorker: the job takes the whole worker; gpus then lists every
	// GPU the worker does not keep out of use, and nothing runs beside it.
	WholeWorker bool `json:"whole_worker,omitempty"`
	// CheckpointsEndpoint is where the attempt's upload token commits,
	// lists and reads the job's checkpoints (see CheckpointCommit); absent
	// when the orchestrator keeps none for this job.
	CheckpointsEndpoint string `json:"checkpoints_endpoint,omitempty"`
}

// AssignedGPU is one GPU given to an attempt: the worker's index for it and,
// where the worker reported one, its UUID.
type AssignedGPU struct {
	Index int    `json:"index"`
	UUID  string `json:"uuid,omitempty"`
}

// JobCancelEvent asks the worker to stop an attempt.
type JobCancelEvent struct {
	Type         string  `json:"type"`
	JobID        string  `json:"job_id"`
	Attempt      int     `json:"attempt,omitempty"`
	GraceSeconds float64 `json:"grace_seconds,omitempty"`
}

// DrainEvent tells the worker to finish its job and take no new one.
type DrainEvent struct {
	Type   string `json:"type"`
	Reason string `json:"reason"`
}

// ShutdownEvent tells the worker to exit. Reason is repeated under data because
// upstream nests it there while the agent reads the top level.
type ShutdownEvent struct {
	Type   string            `json:"type"`
	Reason string            `json:"reason"`
	Data   map[string]string `json:"data"`
}

// NewShutdownEvent builds a shutdown event with the reason in both places.
func NewShutdownEvent(reason string) ShutdownEvent {
	return ShutdownEvent{Type: EventShutdown, Reason: reason, Data: map[string]string{"reason": reason}}
}

// HeaderWorkerSession carries, on every request of a workerd, the id of its
// installation (kept in its state directory, so it survives restarts). The
// orchestrator lets one installation at a time use a worker's token.
const HeaderWorkerSession = "X-Worker-Session"

// ErrorBody is the JSON body of every error response.
type ErrorBody struct {
	Detail string `json:"detail"`
	Error  string `json:"error"`
	Action string `json:"action,omitempty"`
	// RequestID names an unexpected failure in the server's log; the detail
	// of such a failure is only there.
	RequestID string `json:"request_id,omitempty"`
}

// Error codes used in ErrorBody.Error.
const (
	CodeInvalidJSON    = "invalid_json"
	CodeInvalidRequest = "invalid_request"
	CodeTooLarge       = "request_too_large"
	CodeNotFound       = "not_found"
	CodeConflict       = "conflict"
	CodeStaleAttempt   = "stale_attempt"
	// CodeSessionActive refuses a workerd whose token another workerd
	// installation, still alive, is using (see HeaderWorkerSession).
	CodeSessionActive = "session_active"
	CodeInvalidToken  = "invalid_token"
	CodeUnauthorized  = "unauthorized"
	CodeForbidden     = "forbidden"
	CodeRateLimited   = "rate_limited"
	CodeUnavailable   = "unavailable"
	CodeInternal      = "internal"
)

// CodeTokenExpired (HTTP 401): the admin token was valid but its life
// (a command-line login, a person's own token) has run out; log in again.
const CodeTokenExpired = "token_expired"

// CodeInsufficientStorage (HTTP 507): a write found the disk it needs full.
const CodeInsufficientStorage = "insufficient_storage"

var idEncoding = base32.StdEncoding.WithPadding(base32.NoPadding)

func newID(prefix string) string {
	b := make([]byte, 8) // 64 bits → 13 base32 chars; we keep 12 (60 bits)
	if _, err := rand.Read(b); err != nil {
		panic("crypto/rand failed: " + err.Error())
	}
	return prefix + strings.ToLower(idEncoding.EncodeToString(b))[:12]
}

// NewWorkerID returns "w_" followed by 12 lowercase base32 characters.
func NewWorkerID() string { return newID("w_") }

// NewRequestID returns "req_" followed by 12 lowercase base32 characters.
func NewRequestID() string { return newID("req_") }

// NewJobID returns "j_" followed by 12 lowercase base32 characters.
func NewJobID() string { return newID("j_") }

// NewTokenID returns an admin token's id: "tok_" followed by 12 lowercase
// base32 characters.
func NewTokenID() string { return newID("tok_") }

// NewPersonID returns a person's id: "p_" followed by 12 lowercase base32
// characters.
func NewPersonID() string { return newID("p_") }

// Time formats t as RFC 3339 in UTC, the way every timestamp goes on the wire.
func Time(t time.Time) string { return t.UTC().Format(time.RFC3339) }
