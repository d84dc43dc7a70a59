package adminapi

import (
	"context"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/audit"
	"github.com/simpletuner/simpletuner-orchestration/internal/lifecycle"
	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
	"github.com/simpletuner/simpletuner-orchestration/internal/store"
)

// Store is what the API reads and writes of the store: one view per kind
// of record its handler groups touch.
type Store interface {
	JobStore
	WorkerStore
	TokenStore
	AuditReader
	TeamReader
	PeopleStore
	SignInStore
	ApprovalStore
}

// JobStore is what the queue calls read of jobs (views, counts, logs, the
// queue position) and their one write, the submit.
type JobStore interface {
	GetJob(ctx context.Context, id string) (store.Job, error)
	ListJobs(ctx context.Context, f store.JobFilter) (jobs []store.Job, total int, err error)
	ListAttempts(ctx context.Context, jobID string) ([]store.Attempt, error)
	ReadLog(ctx context.Context, jobID string, after store.LogCursor, maxBytes int) ([]store.LogChunk, error)
	QueuePosition(ctx context.Context, priority int, seq int64) (int, error)
	CountJobs(ctx context.Context) (map[protocol.JobStatus]int, error)
	CountJobsIn(ctx context.Context, statuses []protocol.JobStatus) (map[protocol.JobStatus]int, error)
	CountJobsEndedBetween(ctx context.Context, from, to time.Time) (map[protocol.JobStatus]int, error)
	InsertTeamJob(ctx context.Context, j store.Job, maxQueued int, rec *audit.Record) (store.Job, error)
	Dependencies(ctx context.Context, jobID string) ([]lifecycle.Dependency, bool, error)
}

// WorkerStore is what the worker calls read and change of workers.
type WorkerStore interface {
	GetWorker(ctx context.Context, id string) (store.Worker, error)
	ListWorkers(ctx context.Context, f store.WorkerFilter) (workers []store.Worker, total int, err error)
	SummarizeWorkers(ctx context.Context) ([]store.WorkerGroup, error)
	GPULeases(ctx context.Context, workerID string) ([]store.GPULease, error)
	CreateWorker(ctx context.Context, w store.Worker, tokenHash string, rec *audit.Record) error
	UpdateWorker(ctx context.Context, id string, fn func(*store.Worker) (*audit.Record, error)) (store.Worker, error)
	SetWorkerTokenHash(ctx context.Context, id, hash string, rec *audit.Record) error
	DeleteWorker(ctx context.Context, id string, rec *audit.Record) error
}

// TokenStore is the admin tokens the token calls manage.
type TokenStore interface {
	CreateAdminToken(ctx context.Context, t store.AdminToken, rec *audit.Record) error
	ListAdminTokens(ctx context.Context) ([]store.AdminToken, error)
	RevokeAdminToken(ctx context.Context, id string, rec *audit.Record) error
}

// AuditReader is the audit log as the audit calls read it.
type AuditReader interface {
	AuditBounds(ctx context.Context) (checkpoint, head store.AuditLink, err error)
	ListAudit(ctx context.Context, sinceSeq int64, limit int) ([]audit.Record, error)
	ListAuditNewest(ctx context.Context, f store.AuditFilter) ([]audit.Record, error)
}

// TeamReader is what the team calls read of the teams' standing.
type TeamReader interface {
	TeamsWithJobs(ctx context.Context) ([]string, error)
	TeamUsage(ctx context.Context, fromDay string) ([]store.TeamDay, error)
	ListActiveAttempts(ctx context.Context) ([]store.ActiveAttempt, error)
	CountQueuedOfTeam(ctx context.Context, team string) (int, error)
}
