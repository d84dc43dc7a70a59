package api

import "github.com/simpletuner/simpletuner-orchestration/internal/approval"

// ApprovalRequest is a held job's request for approval, in the shape
// SimpleTuner's own approvals API answers (user_id is our submitter, a
// string such as "person:p_…", where SimpleTuner has a number), with the
// job's team, status and the rule's name added.
type ApprovalRequest struct {
	ID          int64  `json:"id"`
	JobID       string `json:"job_id"`
	UserID      string `json:"user_id"`
	RequestedBy string `json:"requested_by"`
	Team        string `json:"team"`
	RuleID      string `json:"rule_id"`
	RuleName    string `json:"rule_name"`
	Status      string `json:"status"`
	// Reason says what about the job matched the rule.
	Reason     string `json:"reason"`
	ConfigName string `json:"config_name"`
	JobStatus  string `json:"job_status"`
	// EstimatedCost is the job's estimated GPU-hours; null when unknown.
	EstimatedCost *float64 `json:"estimated_cost"`
	// Approver is who may decide: "lead" (a lead of the team, or an
	// admin) or "admin".
	Approver    string  `json:"approver"`
	ReviewedBy  *string `json:"reviewed_by"`
	ReviewedAt  *string `json:"reviewed_at"`
	ReviewNotes *string `json:"review_notes"`
	CreatedAt   string  `json:"created_at"`
	// ExpiresAt is always null: a request waits until it is decided or
	// its job is cancelled.
	ExpiresAt *string `json:"expires_at"`
}

// ApprovalRequestsQuery filters GET /api/approvals/requests.
type ApprovalRequestsQuery struct {
	Status      string
	PendingOnly bool
	Limit       int
	Offset      int
}

// ApprovalRequests is GET /api/approvals/requests: a page, newest first,
// with how many are pending in the caller's teams.
type ApprovalRequests struct {
	Requests     []ApprovalRequest `json:"requests"`
	Total        int               `json:"total"`
	PendingCount int               `json:"pending_count"`
}

// PendingApprovals is GET /api/approvals/requests/pending/count.
type PendingApprovals struct {
	Count int `json:"count"`
}

// ApprovalRef names a request by number, or by its job.
type ApprovalRef struct {
	ID    int64
	JobID string
}

// ApprovalDecision is the body of an approve or a reject: notes are
// optional; a rejection needs a reason.
type ApprovalDecision struct {
	Ref    ApprovalRef `json:"-"`
	Notes  string      `json:"notes"`
	Reason string      `json:"reason"`
}

// ApprovalDecided answers an approve or a reject.
type ApprovalDecided struct {
	Success    bool   `json:"success"`
	RequestID  int64  `json:"request_id"`
	JobID      string `json:"job_id"`
	Status     string `json:"status"` // the job's, afterwards
	ApprovedBy string `json:"approved_by,omitempty"`
	RejectedBy string `json:"rejected_by,omitempty"`
}

// ApprovalRule is a rule as the API shows it: from the configuration
// (source "config", ID "config:<name>", read-only) or made through the API.
type ApprovalRule struct {
	ID        string `json:"id"`
	Name      string `json:"name"`
	Source    string `json:"source"`
	Position  int    `json:"position"`
	Approver  string `json:"approver"`
	CreatedAt string `json:"created_at,omitempty"`
	CreatedBy string `json:"created_by,omitempty"`
	approval.Conditions
}

// ApprovalRules is GET /api/approvals/rules, in the order they are
// checked.
type ApprovalRules struct {
	Rules []ApprovalRule `json:"rules"`
}

// ApprovalRuleInput creates a rule (POST) or changes one (PATCH: the
// fields given replace the rule's; conditions given replace them all).
type ApprovalRuleInput struct {
	ID         string               `json:"-"`
	Name       *string              `json:"name"`
	Approver   *string              `json:"approver"`
	Position   *int                 `json:"position"`
	Conditions *approval.Conditions `json:"-"`
}

// SubmitApproval tells a submitter why the job waits.
type SubmitApproval struct {
	RequestID int64  `json:"request_id"`
	Rule      string `json:"rule"`
	Reason    string `json:"reason"`
}

// RuleRef names a rule by ID.
type RuleRef struct {
	ID string
}

// Deleted answers a delete.
type Deleted struct {
	Success bool   `json:"success"`
	ID      string `json:"id"`
}
