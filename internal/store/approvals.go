package store

import (
	"context"
	"encoding/json"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/audit"
)

// Where an approval rule comes from: the store keeps those made through
// the API; those of [[approval_rules]] live in the configuration.
const (
	RuleFromConfig = "config"
	RuleFromAPI    = "api"
)

// Approval request states.
const (
	ApprovalPending   = "pending"
	ApprovalApproved  = "approved"
	ApprovalRejected  = "rejected"
	ApprovalCancelled = "cancelled" // the job was cancelled while it waited
)

// ApprovalRule is a rule that holds a matching job at submit. Conditions is
// the rule's JSON object of conditions (internal/approval reads it); the
// store keeps it as it is.
type ApprovalRule struct {
	ID         string // "ar_…"
	Position   int
	Name       string
	Conditions json.RawMessage
	Approver   string // "lead" or "admin"
	Source     string // RuleFromConfig or RuleFromAPI
	CreatedAt  time.Time
	CreatedBy  string
}

// ApprovalRequest is a held job's request for approval.
type ApprovalRequest struct {
	ID       int64 // assigned by the store, increasing
	JobID    string
	Team     string
	RuleID   string
	RuleName string
	// Reason says what about the job matched the rule.
	Reason string
	// GPUHours is the job's estimated GPU-hours; nil when unknown.
	GPUHours    *float64
	RequestedBy string
	Approver    string // "lead" or "admin"
	Status      string
	ReviewedBy  string
	ReviewedAt  *time.Time
	// ReviewNotes are the approver's notes, or a rejection's reason.
	ReviewNotes string
	CreatedAt   time.Time
	// ConfigName and JobStatus are read from the job with the request.
	ConfigName string
	JobStatus  string
}

// ApprovalFilter narrows ListApprovalRequests, newest first. Zero values
// mean "any" and "no limit"; Teams nil keeps every team's.
type ApprovalFilter struct {
	Teams  []string
	Status string
	Limit  int
	Offset int
}

// ApprovalDecision is a lead's (or an admin's) answer to a request.
type ApprovalDecision struct {
	RequestID int64
	Approve   bool
	By        string // the actor deciding
	// Notes go with an approval; Reason is a rejection's, required there.
	Notes  string
	Reason string
	At     time.Time
	Audit  *audit.Record
}

// ApprovalOutbox is implemented by an Outbox that makes events of approval
// requests: the store calls it, when the installed Outbox has it, for a
// job inserted held and for a decision on it, in their transactions.
type ApprovalOutbox interface {
	JobHeld(j Job, r ApprovalRequest) []OutboxEvent
	ApprovalDecided(before, after Job, r ApprovalRequest) []OutboxEvent
}

// Approvals keeps the approval rules and the requests of held jobs.
type Approvals interface {
	// InsertHeldJob stores j in state pending_approval and its request r,
	// in one transaction with j's submit count and rec; it returns both as
	// stored (r with its ID).
	InsertHeldJob(ctx context.Context, j Job, r ApprovalRequest, rec *audit.Record) (Job, ApprovalRequest, error)
	// DecideApproval answers a pending request: approved, its job moves to
	// queued; rejected, to cancelled with "rejected by <by>: <reason>".
	// A request no longer pending (decided, or its job cancelled) is
	// ErrConflict and nothing changes; an unknown one ErrNotFound.
	DecideApproval(ctx context.Context, d ApprovalDecision) (Job, ApprovalRequest, error)
	GetApprovalRequest(ctx context.Context, id int64) (ApprovalRequest, error)
	GetApprovalRequestByJob(ctx context.Context, jobID string) (ApprovalRequest, error)
	// ListApprovalRequests returns a page of requests, newest first, and
	// how many match in all.
	ListApprovalRequests(ctx context.Context, f ApprovalFilter) ([]ApprovalRequest, int, error)
	// CountPendingApprovals counts the pending requests of teams (nil: all).
	CountPendingApprovals(ctx context.Context, teams []string) (int, error)
	// SubmitCounts reads how many jobs actor submitted in all and on day
	// (YYYY-MM-DD, UTC). Every insert of a job counts.
	SubmitCounts(ctx context.Context, actor, day string) (ever, onDay int, err error)

	// ListApprovalRules lists the rules made through the API in the order
	// they are checked (by position).
	ListApprovalRules(ctx context.Context) ([]ApprovalRule, error)
	GetApprovalRule(ctx context.Context, idOrName string) (ApprovalRule, error)
	// CreateApprovalRule stores an API rule at the end of the order (its
	// ID and position are set); a name in use is ErrDuplicate.
	CreateApprovalRule(ctx context.Context, r ApprovalRule, rec *audit.Record) (ApprovalRule, error)
	// UpdateApprovalRule lets fn change an API rule and writes it back in
	// one transaction (fn may run more than once; see Store).
	UpdateApprovalRule(ctx context.Context, id string, fn func(*ApprovalRule) (*audit.Record, error)) (ApprovalRule, error)
	DeleteApprovalRule(ctx context.Context, id string, rec *audit.Record) error
}
