package webhook

import (
	"fmt"
	"strings"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/webhook/spec"
)

// SlackText is the one-line message of an event in the slack format.
func SlackText(p Payload) string {
	switch {
	case p.Job != nil:
		return jobText(p)
	case p.GPU != nil && p.Worker != nil:
		return fmt.Sprintf(":warning: GPU %d of worker %s was fenced as unhealthy: %s", p.GPU.Index, workerName(p.Worker), slackEscape(p.GPU.Reason))
	case p.Worker != nil && p.Type == spec.WorkerOffline:
		msg := fmt.Sprintf(":red_circle: Worker %s went offline", workerName(p.Worker))
		if p.Worker.Reason != "" {
			msg += ": " + slackEscape(p.Worker.Reason)
		}
		return msg
	case p.Worker != nil:
		return fmt.Sprintf(":large_green_circle: Worker %s is back (%s)", workerName(p.Worker), p.Worker.Status)
	}
	return slackEscape(p.Type)
}

func jobText(p Payload) string {
	j := p.Job
	name := fmt.Sprintf("Job %s", link(j.Links.Dashboard, j.ID))
	if j.ConfigName != "" {
		name += " (" + slackEscape(j.ConfigName) + ")"
	}
	on := ""
	if j.WorkerID != "" {
		on = " on worker " + slackEscape(j.WorkerID)
	}
	switch p.Type {
	case spec.JobQueued:
		return fmt.Sprintf(":inbox_tray: %s was queued by %s", name, slackEscape(j.SubmittedBy))
	case spec.JobStarted:
		return fmt.Sprintf(":arrow_forward: %s started%s (attempt %d)", name, on, j.Attempt)
	case spec.JobCompleted:
		return fmt.Sprintf(":white_check_mark: %s completed%s%s", name, on, took(j))
	case spec.JobFailed:
		return fmt.Sprintf(":x: %s failed%s%s: %s", name, on, took(j), slackEscape(j.Error))
	case spec.JobCancelled:
		return fmt.Sprintf(":no_entry_sign: %s was cancelled", name)
	case spec.JobRequeued, spec.JobPreempted:
		return fmt.Sprintf(":repeat: %s is back in the queue: %s", name, slackEscape(j.Reason))
	case spec.JobApprovalRequested:
		return fmt.Sprintf(":raised_hand: %s by %s waits for approval (rule %s): %s", name, slackEscape(j.SubmittedBy),
			slackEscape(approvalField(j, func(a *ApprovalInfo) string { return a.Rule })), slackEscape(approvalField(j, func(a *ApprovalInfo) string { return a.Reason })))
	case spec.JobApproved:
		return fmt.Sprintf(":thumbsup: %s was approved by %s", name, slackEscape(approvalField(j, func(a *ApprovalInfo) string { return a.By })))
	case spec.JobRejected:
		return fmt.Sprintf(":thumbsdown: %s was rejected by %s: %s", name, slackEscape(approvalField(j, func(a *ApprovalInfo) string { return a.By })),
			slackEscape(approvalField(j, func(a *ApprovalInfo) string { return a.Notes })))
	case spec.CheckpointSaved:
		if p.Checkpoint != nil {
			return fmt.Sprintf(":floppy_disk: %s saved a checkpoint: %s", name, slackEscape(p.Checkpoint.Path))
		}
	}
	return fmt.Sprintf("%s: %s", name, slackEscape(p.Type))
}

// approvalField reads one field of a job event's approval ("" without one).
func approvalField(j *JobInfo, f func(*ApprovalInfo) string) string {
	if j.Approval == nil {
		return ""
	}
	return f(j.Approval)
}

// took is " after 2h13m" when the job's start and end are known.
func took(j *JobInfo) string {
	start, err1 := time.Parse(time.RFC3339Nano, j.StartedAt)
	end, err2 := time.Parse(time.RFC3339Nano, j.EndedAt)
	if err1 != nil || err2 != nil || end.Before(start) {
		return ""
	}
	return " after " + end.Sub(start).Round(time.Second).String()
}

func workerName(w *WorkerInfo) string {
	if w.Name != "" && w.Name != w.ID {
		return slackEscape(w.Name) + " (" + slackEscape(w.ID) + ")"
	}
	return slackEscape(w.ID)
}

// link is Slack's <url|text>, or the text alone for a path (Slack links
// only absolute URLs).
func link(u, text string) string {
	if strings.HasPrefix(u, "http://") || strings.HasPrefix(u, "https://") {
		return "<" + u + "|" + slackEscape(text) + ">"
	}
	return slackEscape(text)
}

// slackEscape escapes the three characters Slack's text format reserves.
func slackEscape(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace(s)
}
