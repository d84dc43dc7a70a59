// Package store defines the persistence contract of simpletuner-orchestratord.
// Two backends implement it (store/postgres, store/sqlite) and both must pass the
// conformance suite in store/storetest. The store knows nothing of HTTP; the
// orchestrator knows nothing of SQL.
//
// Every change to a job goes through TransitionJob, a compare-and-set on
// (job, attempt, state): callers read, decide, and write only if nothing moved
// in between. A terminal job is never changed again.
package store

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/audit"
	"github.com/simpletuner/simpletuner-orchestration/internal/lifecycle"
	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
)

// Errors returned by every backend. Callers test them with errors.Is.
var (
	ErrNotFound = errors.New("not found")
	// ErrConflict: a compare-and-set found another state, attempt or worker than expected.
	ErrConflict = errors.New("state changed concurrently")
	// ErrNoJob: the job a claim names is no longer queued (claimed or
	// cancelled since the scheduler read the queue).
	ErrNoJob = errors.New("no matching queued job")
	// ErrDuplicate: an insert collided with an existing id or token hash.
	ErrDuplicate = errors.New("already exists")
	// ErrSchemaTooNew: the database was migrated by a newer binary.
	ErrSchemaTooNew = errors.New("database schema is newer than this binary")
	// ErrIllegalMove: a transition the job lifecycle does not allow (the
	// error also wraps a *lifecycle.ErrIllegal naming the move).
	ErrIllegalMove = errors.New("illegal job move")
	// ErrDiskFull: the database could not write for lack of space (the
	// error also wraps the engine's own).
	ErrDiskFull = errors.New("the database's disk is full")
	// ErrDependencyUnmet: a job submitted depends on a job that already
	// ended in a way that can never meet the dependency.
	ErrDependencyUnmet = errors.New("the dependency can never be met")
	// ErrTooManyDependents: MaxDependents jobs already wait for the job
	// a submit names.
	ErrTooManyDependents = errors.New("that is the most one job may have")
)

// GPUInfo is a worker's gpu_info as it reported it (Raw, a JSON object, "{}"
// when unknown) and what that says, read once when it is stored or loaded.
type GPUInfo struct {
	Raw json.RawMessage
	protocol.GPUSummary
}

// ReadGPUInfo reads a worker's reported gpu_info; anything unreadable is no
// GPU.
func ReadGPUInfo(raw json.RawMessage) GPUInfo {
	return GPUInfo{Raw: raw, GPUSummary: gpuInfos.parse(raw)}
}

// gpuInfos remembers what gpu_info texts say. Every read of a worker row
// parses its gpu_info (the token check of each worker request, the
// scheduler's pool, the claim), a worker reports the same text until it
// registers again, and parsing one with eight GPUs costs tens of
// microseconds: on a job's way to its worker that adds up.
var gpuInfos = gpuInfoMemo{m: map[string]protocol.GPUSummary{}}

// gpuInfoMemoSize bounds the memo; past it, it starts over.
const gpuInfoMemoSize = 4096

type gpuInfoMemo struct {
	mu sync.Mutex
	m  map[string]protocol.GPUSummary
}

// parse is protocol.ParseGPUInfo, remembered. Each caller gets its own copy
// of the devices: the remembered summary is never handed out to be changed.
func (c *gpuInfoMemo) parse(raw json.RawMessage) protocol.GPUSummary {
	c.mu.Lock()
	g, ok := c.m[string(raw)]
	c.mu.Unlock()
	if !ok {
		g = protocol.ParseGPUInfo(raw)
		c.mu.Lock()
		if len(c.m) >= gpuInfoMemoSize {
			clear(c.m)
		}
		c.m[string(raw)] = g
		c.mu.Unlock()
	}
	g.Devices = slices.Clone(g.Devices)
	return g
}

// MaxDependents bounds the jobs that may wait for one job: its end moves
// them all in its own transaction, which holds the database's writer (on
// SQLite) for about a millisecond per waiting job.
const MaxDependents = 1000

// Worker is a registered (or admin-created) worker.
type Worker struct {
	ID          string
	Name        string
	Type        protocol.WorkerType
	Status      protocol.WorkerStatus
	GPUInfo     GPUInfo // as reported
	Provider    string
	Labels      map[string]string // effective labels (admin's win over reported)
	AdminLabels map[string]string // keys an admin set; reported labels never override these
	// LabelsLocked: an admin pinned the labels; what the worker reports is
	// ignored and Labels are the admin's alone.
	LabelsLocked bool
	Persistent   bool // what the agent last reported (fact, not policy)
	// Capabilities is what a protocol-2 worker reported about itself.
	Capabilities protocol.Capabilities
	// Local is true for workers attached through the admin unix socket (target "local").
	Local          bool
	CurrentJobID   string // "" when none
	Protocol       int
	AgentVersion   string
	LastHeartbeat  *time.Time
	ConnectedAt    *time.Time // when the current stream opened
	StreamInstance string     // orchestrator instance holding the stream; "" when none
	// Session names the workerd installation (an id kept in its state
	// directory) that registered last; "" until one that sends it registers.
	Session   string
	CreatedAt time.Time
	CreatedBy string
	// TokenHash is filled on read (hex SHA-256); UpdateWorker ignores changes to
	// it: only CreateWorker and SetWorkerTokenHash write it.
	TokenHash string
	// Running is how many attempts are out on the worker and GPUsUsed how
	// many of its GPUs they hold; WholeWorkerHeld is set while an attempt that
	// took the whole worker runs. The store keeps them in the transactions
	// that open and end attempts; UpdateWorker ignores changes to them.
	Running, GPUsUsed int
	WholeWorkerHeld   bool
	// GPUConditions are the GPUs the worker keeps out of use, as it last
	// reported them; placement gives them to no job.
	GPUConditions []protocol.GPUCondition
	// GPUClears are the indices of unhealthy GPUs an admin cleared that the
	// worker still reports: it is told until it no longer does.
	GPUClears []int
}

// QueuedJob is what placement reads of a queued job: where it may run and
// what it needs there. The scheduler reads the head of the queue on every
// pass; configs and tokens stay in the database until a claim.
type QueuedJob struct {
	ID           string
	Seq          int64 // submission order: with Priority, the queue position
	Priority     int
	Team         string
	Target       protocol.Target
	WorkerLabels map[string]string // key → glob
	GPUCount     int
	WholeWorker  bool
	MinVRAMGB    float64
}

// Queued is the part of j that placement reads.
func (j Job) Queued() QueuedJob {
	return QueuedJob{ID: j.ID, Seq: j.Seq, Priority: j.Priority, Team: j.Team, Target: j.Target, WorkerLabels: j.WorkerLabels,
		GPUCount: j.GPUCount, WholeWorker: j.WholeWorker, MinVRAMGB: j.MinVRAMGB}
}

// WorkerState is the part of a worker row that the per-job checks read: its
// current token (before a job_submit goes out on a stream) and whether a
// drained ephemeral worker is now idle (after an attempt ends).
type WorkerState struct {
	Type         protocol.WorkerType
	Status       protocol.WorkerStatus
	CurrentJobID string
	TokenHash    string
}

// GPULease is a GPU of a worker held by a job's attempt: no two attempts
// hold one GPU (the store refuses the second claim).
type GPULease struct {
	WorkerID string
	Index    int
	JobID    string
	Attempt  int
}

// WorkerFilter narrows ListWorkers. Zero values mean "any"/"no limit".
type WorkerFilter struct {
	Status protocol.WorkerStatus
	Name   string // exactly this name
	Limit  int
	Offset int
}

// Job is one queued training job and the state of its current attempt.
type Job struct {
	ID           string
	ConfigName   string
	Config       json.RawMessage // JSON object sent to the worker
	Dataloader   json.RawMessage // optional, nil when absent
	HFToken      string          // secret: never in API responses
	Target       protocol.Target
	WorkerLabels map[string]string // key → glob
	// GPUCount is how many GPUs the job gets; with WholeWorker it gets the
	// whole worker instead (all its GPUs, alone) and GPUCount is 0.
	GPUCount       int
	WholeWorker    bool
	MinVRAMGB      float64
	Priority       int
	MaxRetries     int
	RetriesUsed    int // attempts that ended worker_lost/timeout (withdrawn ones don't count)
	TimeoutSeconds int // 0 = none
	Status         protocol.JobStatus
	Attempt        int    // number of the current (or last) attempt; 0 before the first claim
	WorkerID       string // worker of the current attempt, "" when queued
	Error          string
	Progress       json.RawMessage
	// NoCheckpoints: the submit opted out of keeping the job's checkpoints
	// in its artifacts (and of resuming a retry from them).
	NoCheckpoints bool
	Seq           int64 // submission order, assigned by the store
	SubmittedBy   string
	// Team is the submitting token's team ("default" when it had none).
	Team string
	// PreemptedBy is set while the current attempt is being preempted: the
	// job it makes room for and why ("j_… (team nlp under its share)").
	// The attempt then ends preempted and the job is requeued.
	PreemptedBy string
	// DependsOn are the jobs this one waits for (their JobID and When),
	// and HoldUnmet whether it keeps waiting when one of them can never
	// be met instead of ending cancelled. The inserts store them; reads of
	// a job leave them empty (Dependencies reads them).
	DependsOn      []lifecycle.Dependency
	HoldUnmet      bool
	CreatedAt      time.Time
	UpdatedAt      time.Time
	StartedAt      *time.Time // current attempt acknowledged
	EndedAt        *time.Time // terminal
	AckDeadline    *time.Time // dispatched: withdraw if no ack by then
	CancelDeadline *time.Time // canceling: force cancelled by then
}

// Facts is what the lifecycle's decisions read of the job.
func (j Job) Facts() lifecycle.Job {
	return lifecycle.Job{ID: j.ID, Status: j.Status, Attempt: j.Attempt, RetriesUsed: j.RetriesUsed,
		MaxRetries: j.MaxRetries, TimeoutSeconds: j.TimeoutSeconds, StartedAt: j.StartedAt,
		AckDeadline: j.AckDeadline, CancelDeadline: j.CancelDeadline, PreemptedBy: j.PreemptedBy}
}

// Attempt is one dispatch of a job to a worker.
type Attempt struct {
	JobID           string
	Number          int
	WorkerID        string
	UploadTokenHash string
	DispatchedAt    time.Time
	AckedAt         *time.Time
	EndedAt         *time.Time
	Outcome         protocol.AttemptOutcome // "" while running
	Error           string
	// Usage is what the attempt's processes used, as its worker reported at
	// the end; nil when not reported.
	Usage *protocol.Usage
	// GPUs are the indices of the worker's GPUs the attempt was given.
	GPUs []int
}

// Checkpoint is a complete checkpoint of a job: every one of its files was
// stored in the artifacts of the attempt that committed it and checked
// against its size and SHA-256 before the row was written.
type Checkpoint struct {
	JobID     string
	Attempt   int
	Name      string // checkpoint-<step>[-suffix]
	Step      int64
	Bytes     int64
	Files     []protocol.CheckpointFile
	CreatedAt time.Time
}

// JobFilter narrows ListJobs. Zero values mean "any"/"no limit". Results are in
// submission order (Seq ascending), or newest first with NewestFirst.
type JobFilter struct {
	Statuses []protocol.JobStatus
	WorkerID string // current attempt's worker
	// Teams keeps the jobs of these teams ("default" includes jobs with no
	// team); nil keeps every team's.
	Teams  []string
	Limit  int
	Offset int
	// Newest reverses the order: latest submission (highest Seq) first.
	Newest bool
	// AfterSeq continues a list after the job with this Seq, in the list's
	// order (a keyset cursor: it costs the same on every page, unlike
	// Offset). 0 starts at the beginning.
	AfterSeq int64
}

// ClaimRequest gives one queued job to a worker. Which job goes where is the
// scheduler's decision (placement); the store only makes it stick.
type ClaimRequest struct {
	WorkerID string
	// JobID is the job claimed; it must still be queued.
	JobID string
	// GPUs are the indices of the worker's GPUs the attempt gets; the claim
	// fails with ErrConflict if another attempt holds one of them, or the
	// worker keeps one of them out of use.
	GPUs []int
	// WholeWorker gives the attempt the whole worker: the claim fails with
	// ErrConflict unless nothing runs there, and nothing else is claimed
	// there until the attempt ends.
	WholeWorker bool
	// UploadTokenHash is stored on the new attempt.
	UploadTokenHash string
	AckDeadline     time.Time
	Now             time.Time
	Audit           *audit.Record // appended in the same transaction
}

// ClaimResult is the outcome of one claim of ClaimJobs: the job as claimed and
// its new attempt, or why this claim was refused (ErrNoJob, ErrConflict,
// ErrIllegalMove), in which case it changed nothing.
type ClaimResult struct {
	Job     Job
	Attempt Attempt
	Err     error
}

// JobTransition is a compare-and-set on a job. It applies only when the job is
// in state From with current attempt ExpectAttempt (and, when ExpectWorker is
// set, that attempt belongs to that worker); otherwise ErrConflict and nothing
// changes. A job in a terminal state never matches. The step must be a legal
// move of the lifecycle (lifecycle.Check), else ErrIllegalMove.
type JobTransition struct {
	JobID         string
	ExpectAttempt int
	ExpectWorker  string
	From          protocol.JobStatus
	// Step is the move and its effects on the current attempt: EndAttempt
	// closes it and frees its worker (the worker's status is settled by the
	// lifecycle's rule), Ack marks it started, SpendRetry counts a retry.
	lifecycle.Step
	Now            time.Time
	Progress       json.RawMessage
	CancelDeadline *time.Time
	// PreemptedBy, when set, replaces the job's PreemptedBy (a move back to
	// the queue clears it in any case).
	PreemptedBy *string
	// Usage is stored on the attempt the step ends (with EndAttempt).
	Usage *protocol.Usage
	Audit *audit.Record
}

// LogChunk is a piece of a job's log.
type LogChunk struct {
	Attempt int
	Offset  int64 // byte offset within the attempt's output
	Data    []byte
}

// LogCursor marks a position in a job's log: everything before (Attempt, Offset).
type LogCursor struct {
	Attempt int
	Offset  int64
}

// AdminToken is an API credential with scopes. Only the hash is stored.
type AdminToken struct {
	ID     string
	Name   string
	Scopes []string
	Hash   string // hex SHA-256 of the token
	// Team is the team of the jobs the token submits; "" is the default team.
	Team string
	// MaxPriority is the highest priority the token's jobs may have, as the
	// admin who created it granted; nil leaves it its team's max_priority.
	MaxPriority *int
	// PersonID is the person the token belongs to ("" for a service
	// token): disabling them revokes it. CreateAdminToken refuses one for
	// a disabled person with ErrPersonDisabled.
	PersonID  string
	CreatedAt time.Time
	RevokedAt *time.Time
	// ExpiresAt is when the token stops working (a command-line login, a
	// person's own token); nil never.
	ExpiresAt *time.Time
}

// ActiveAttempt is a job's attempt out on a worker, as fair share and
// preemption read it.
type ActiveAttempt struct {
	JobID, Team, WorkerID string
	Status                protocol.JobStatus
	Priority              int
	// GPUs is how many GPUs the attempt holds; WholeWorker, whether it
	// took the whole worker.
	GPUs        int
	WholeWorker bool
	// StartedAt is when the worker acknowledged it (nil: not yet).
	StartedAt *time.Time
	// Preempting is true while it is being preempted.
	Preempting bool
}

// TeamDay is a team's GPU-seconds of ended attempts on one UTC day
// (DayFormat), and when on average they were used.
type TeamDay struct {
	Team       string
	Day        string
	GPUSeconds float64
	UsedAt     time.Time
}

// DayFormat is how a TeamDay (and the team_usage table) names a day.
const DayFormat = "2006-01-02"

// ErrQueueFull: a team already has its max_queued jobs queued.
var ErrQueueFull = errors.New("the team's queue is full")

// Kinds of Notification.
const (
	NotifyWake        = "wake"         // a job was queued or a worker freed: run the scheduler
	NotifyWorkerEvent = "worker_event" // deliver Payload (an SSE frame) to WorkerID's stream
	NotifyWorkerClose = "worker_close" // close WorkerID's stream; Payload is the reason
	// NotifyResync comes from the backend itself: notifications may have
	// been lost (its listener reconnected), so whatever they would have
	// carried must be found out again.
	NotifyResync = "resync"
)

// WorkerGroup is how many workers share a status, a reported GPU description
// and whether they hold a job (SummarizeWorkers).
type WorkerGroup struct {
	Status  protocol.WorkerStatus
	GPUInfo GPUInfo
	HasJob  bool
	Count   int
	// GPUsUsed is how many of the group's GPUs attempts hold, all workers
	// together.
	GPUsUsed int
}

// DashboardSession is a browser signed in to the web dashboard.
type DashboardSession struct {
	IDHash    string // hex SHA-256 of the random session id in the browser's cookie
	TokenID   string // the admin token the session acts with
	CreatedAt time.Time
	LastSeen  time.Time // moved forward by TouchDashboardSession; idle expiry counts from here
	PeerIP    string
	UserAgent string
	// Token is that admin token as it is now, filled on read, so a caller sees
	// a revocation on the session's next request.
	Token AdminToken
}

// AuditFilter narrows ListAuditNewest. Empty fields match everything.
type AuditFilter struct {
	Actor string // exact
	// Action matches exactly, or as a prefix when it ends in "." ("worker.").
	Action   string
	TargetID string // exact
	// BeforeSeq returns only records older than this sequence number (0: from the newest).
	BeforeSeq int64
	Limit     int
}

// Notification wakes other orchestrator instances sharing the database.
type Notification struct {
	Kind     string `json:"kind"` // one of the Notify* kinds
	WorkerID string `json:"worker_id,omitempty"`
	Payload  string `json:"payload,omitempty"`
	Origin   string `json:"origin,omitempty"` // sending instance
}

// Store is implemented by every backend. All methods are safe for concurrent use.
//
// A function handed to the store runs inside its transaction: UpdateWorker's
// fn and the methods of the Outbox (SetOutbox). An implementation may run such
// a function more than once for one call (the SQLite backend runs a write
// again on its own when the batch it was group-committed with failed); only
// the run whose transaction commits takes effect, and the caller gets that
// run's outcome. So these functions only compute: they change what they are
// handed and return what they decide, and touch nothing else (no I/O, no
// sends, no counters). No implementation may count on one running once, nor
// any caller on one running once.
type Store interface {
	// Ping reports whether the database answers.
	Ping(ctx context.Context) error
	Close() error
	// Kind names the engine: "sqlite" or "postgres".
	Kind() string

	// Workers.
	CreateWorker(ctx context.Context, w Worker, tokenHash string, rec *audit.Record) error
	GetWorker(ctx context.Context, id string) (Worker, error)
	// GetWorkers reads the workers with the given IDs, each once, in no
	// particular order; an ID with no worker is left out, and so is one
	// whose status is not among statuses, when statuses are given.
	GetWorkers(ctx context.Context, ids []string, statuses ...protocol.WorkerStatus) ([]Worker, error)
	GetWorkerByTokenHash(ctx context.Context, hash string) (Worker, error)
	// GetReportingWorkerByTokenHash is GetWorkerByTokenHash for a worker's
	// job reports and logs, sent several times per job: it reads only the
	// ID, name, type, status, session, token hash, last heartbeat and GPUs
	// (GPUInfo, GPUConditions, GPUClears); every other field is zero.
	GetReportingWorkerByTokenHash(ctx context.Context, hash string) (Worker, error)
	// GetWorkerState reads a worker's type, status, current job and token
	// hash, for the checks made with every job, which need nothing else of
	// the row.
	GetWorkerState(ctx context.Context, id string) (WorkerState, error)
	ListWorkers(ctx context.Context, f WorkerFilter) (workers []Worker, total int, err error)
	// UpdateWorker reads the worker, lets fn change it, and writes it back in one
	// transaction. fn may return an audit record to append in the same transaction;
	// an error from fn aborts without changes. fn may run more than once (see
	// Store): it changes only the worker it is handed.
	UpdateWorker(ctx context.Context, id string, fn func(*Worker) (*audit.Record, error)) (Worker, error)
	// SummarizeWorkers counts all workers grouped by status, GPU info and
	// whether they hold a job, in one aggregate read.
	SummarizeWorkers(ctx context.Context) ([]WorkerGroup, error)
	SetWorkerTokenHash(ctx context.Context, id, hash string, rec *audit.Record) error
	DeleteWorker(ctx context.Context, id string, rec *audit.Record) error
	// Jobs.
	//
	// InsertJob stores a new job. A queued job with DependsOn is stored
	// waiting, or queued when every job it depends on already ended as
	// asked; it is refused, changing nothing, with ErrNotFound when one of
	// them does not exist, with ErrDependencyUnmet when one already ended
	// otherwise and HoldUnmet is not set, and with ErrTooManyDependents
	// when MaxDependents jobs already wait for one (the error names which).
	InsertJob(ctx context.Context, j Job, rec *audit.Record) (Job, error)
	// InsertTeamJob is InsertJob refusing with ErrQueueFull, and changing
	// nothing, when maxQueued > 0 and j's team already has that many jobs
	// queued. (Two replicas submitting at the same moment may each see
	// room for one more.)
	InsertTeamJob(ctx context.Context, j Job, maxQueued int, rec *audit.Record) (Job, error)
	// Dependencies reads the jobs jobID waits for, in the order its submit
	// named them, each with its state and the status of the job depended
	// on ("" when it no longer exists), and whether the job is held when
	// one can never be met. A job with none has an empty list.
	Dependencies(ctx context.Context, jobID string) ([]lifecycle.Dependency, bool, error)
	GetJob(ctx context.Context, id string) (Job, error)
	// ListJobs returns a page of jobs and how many match the filter in all,
	// from per-status counts kept with every change; with a WorkerID the
	// total is not counted and is -1.
	ListJobs(ctx context.Context, f JobFilter) (jobs []Job, total int, err error)
	// CountJobs returns how many jobs are in each status (absent: none),
	// from the per-status counts: it costs the same whatever the history.
	CountJobs(ctx context.Context) (map[protocol.JobStatus]int, error)
	// CountJobsEndedSince counts the jobs that reached a terminal state at or
	// after since, by status.
	CountJobsEndedSince(ctx context.Context, since time.Time) (map[protocol.JobStatus]int, error)
	// CountJobsEndedBetween counts, by status, the jobs that reached a
	// terminal state in [from, to) (a zero to: no upper bound), reading only
	// that part of the history.
	CountJobsEndedBetween(ctx context.Context, from, to time.Time) (map[protocol.JobStatus]int, error)
	// CountJobsIn counts the jobs in the given statuses (absent: none).
	CountJobsIn(ctx context.Context, statuses []protocol.JobStatus) (map[protocol.JobStatus]int, error)
	// QueuedGPUDemand sums what the queued jobs ask for: GPUs by count, and
	// how many take a whole worker.
	QueuedGPUDemand(ctx context.Context) (gpus, wholeWorkerJobs int, err error)
	// QueuePosition counts the queued jobs a claim offers before a job of this
	// priority and Seq: higher priority, or the same priority and a lower Seq.
	QueuePosition(ctx context.Context, priority int, seq int64) (int, error)
	ListAttempts(ctx context.Context, jobID string) ([]Attempt, error)
	// GetAttemptByUploadTokenHash finds the attempt whose upload token has
	// this digest (hex SHA-256); none is ErrNotFound.
	GetAttemptByUploadTokenHash(ctx context.Context, hash string) (Attempt, error)
	// ClaimJob moves queued job req.JobID to dispatched with attempt+1 on
	// worker req.WorkerID, records the attempt with a lease on each of
	// req.GPUs, and counts it in the worker's load. The worker must be able to
	// take a job (lifecycle.CanClaim) and the GPUs free, else ErrConflict; a
	// job no longer queued is ErrNoJob. It is ClaimJobs with one claim.
	ClaimJob(ctx context.Context, req ClaimRequest) (Job, Attempt, error)
	// ClaimJobs makes several claims, each naming its JobID, in one
	// transaction: a scheduler pass's placements. A refused claim changes
	// nothing and does not stop the others; its reason is in its result. The
	// error is the transaction's: then no claim was made.
	ClaimJobs(ctx context.Context, reqs []ClaimRequest) ([]ClaimResult, error)
	// ListQueued returns up to limit queued jobs in the order they are claimed
	// (priority descending, then submission order), behind after when it is
	// set (the next page), each with only what placement reads: no config, no
	// token.
	ListQueued(ctx context.Context, after *QueuedJob, limit int) ([]QueuedJob, error)
	// ListQueuedOfTeam is ListQueued for one team's jobs; it reads the
	// index EnsureTeamQueueIndex makes (without it, the whole queue).
	ListQueuedOfTeam(ctx context.Context, team string, after *QueuedJob, limit int) ([]QueuedJob, error)
	// EnsureTeamQueueIndex makes the index of each team's queued jobs if it
	// does not exist yet. It is made only once several teams share the
	// fleet: like any index it costs every job's writes (measured: 15 % of
	// the orchestrator's CPU per job on SQLite), which a single team would
	// pay for nothing. Making it reads the jobs table once.
	EnsureTeamQueueIndex(ctx context.Context) error
	// CountQueuedOfTeam counts a team's queued jobs.
	CountQueuedOfTeam(ctx context.Context, team string) (int, error)
	// ListActiveAttempts lists every attempt out on a worker (dispatched,
	// running or canceling), with the GPUs it holds.
	ListActiveAttempts(ctx context.Context) ([]ActiveAttempt, error)
	// TeamsWithJobs lists the teams that have unfinished jobs.
	TeamsWithJobs(ctx context.Context) ([]string, error)
	// TeamUsage lists the GPU-seconds of ended attempts per team and day,
	// for the days from fromDay (YYYY-MM-DD) on; an attempt's GPU-seconds
	// are what its worker reported, or its GPUs times its time running,
	// spread over the days it ran.
	TeamUsage(ctx context.Context, fromDay string) ([]TeamDay, error)
	// GPULeases lists the GPUs of a worker that attempts hold, by index.
	GPULeases(ctx context.Context, workerID string) ([]GPULease, error)
	TransitionJob(ctx context.Context, t JobTransition) (Job, error)

	// Logs. AppendLog stores data at offset of (job, attempt) idempotently: bytes
	// already stored are skipped, a gap (offset beyond what is stored) is
	// ErrConflict. The whole job's log is capped at limit bytes; the first chunk
	// over the cap is cut and a marker line appended, later ones are dropped.
	// It returns the attempt's stored size after the call.
	AppendLog(ctx context.Context, jobID string, attempt int, offset int64, data []byte, limit int64) (size int64, truncated bool, err error)
	// ReadLog returns chunks after cursor in order, at most maxBytes in total (≥ one chunk).
	ReadLog(ctx context.Context, jobID string, after LogCursor, maxBytes int) ([]LogChunk, error)

	// Audit. Records are sealed (Seq, PrevHash, Hash) by the store.
	AppendAudit(ctx context.Context, rec audit.Record) error
	ListAudit(ctx context.Context, sinceSeq int64, limit int) ([]audit.Record, error)
	// ListAuditNewest returns up to f.Limit matching records, newest first.
	ListAuditNewest(ctx context.Context, f AuditFilter) ([]audit.Record, error)

	// Admin tokens.
	CreateAdminToken(ctx context.Context, t AdminToken, rec *audit.Record) error
	GetAdminTokenByHash(ctx context.Context, hash string) (AdminToken, error)
	ListAdminTokens(ctx context.Context) ([]AdminToken, error)
	RevokeAdminToken(ctx context.Context, id string, rec *audit.Record) error

	// Dashboard sessions. Create refuses an unknown or revoked token
	// (ErrNotFound) and a used id hash (ErrDuplicate); Get fills Token and is
	// ErrNotFound once the session is deleted; Touch moves LastSeen forward
	// (never back); DeleteIdle removes sessions last seen before the cutoff.
	CreateDashboardSession(ctx context.Context, s DashboardSession, rec *audit.Record) error
	GetDashboardSession(ctx context.Context, idHash string) (DashboardSession, error)
	TouchDashboardSession(ctx context.Context, idHash string, seen time.Time) error
	DeleteDashboardSession(ctx context.Context, idHash string, rec *audit.Record) error
	DeleteIdleDashboardSessions(ctx context.Context, seenBefore time.Time) (int, error)

	// Checkpoints. PutCheckpoint records a complete checkpoint of a job (one
	// row per attempt and name; the same again replaces it) and, in the same
	// transaction, forgets all but the job's newest keep, which it returns
	// so that their files can be deleted. ListCheckpoints lists a job's
	// checkpoints newest first (step, then attempt, descending).
	// DeleteCheckpoints forgets all of a job's (its artifacts are gone).
	PutCheckpoint(ctx context.Context, c Checkpoint, keep int) (forgotten []Checkpoint, err error)
	ListCheckpoints(ctx context.Context, jobID string) ([]Checkpoint, error)
	DeleteCheckpoints(ctx context.Context, jobID string) error

	// Notifications between instances. SQLite delivers within the process only.
	Publish(ctx context.Context, n Notification) error
	Subscribe(ctx context.Context) (<-chan Notification, error)

	// Retention and sizes.
	History

	// Webhook subscriptions and the outbox of their events.
	Webhooks

	// Sign-ins in progress with an identity provider.
	AuthFlows

	// People who sign in through an identity provider.
	People

	// Approval rules and the requests of the jobs they hold.
	Approvals
}

// FleetGPUs counts the GPUs of st's workers that are not offline, from
// the workers' summary (one aggregate read).
func FleetGPUs(ctx context.Context, st interface {
	SummarizeWorkers(ctx context.Context) ([]WorkerGroup, error)
}) (int, error) {
	groups, err := st.SummarizeWorkers(ctx)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, g := range groups {
		if g.Status != protocol.WorkerOffline {
			n += g.Count * g.GPUInfo.Count
		}
	}
	return n, nil
}

// EachWorker visits every worker of st, a page at a time.
func EachWorker(ctx context.Context, st interface {
	ListWorkers(ctx context.Context, f WorkerFilter) ([]Worker, int, error)
}, fn func(Worker)) error {
	const page = 1000
	for off := 0; ; off += page {
		ws, _, err := st.ListWorkers(ctx, WorkerFilter{Limit: page, Offset: off})
		if err != nil {
			return err
		}
		for _, w := range ws {
			fn(w)
		}
		if len(ws) < page {
			return nil
		}
	}
}
