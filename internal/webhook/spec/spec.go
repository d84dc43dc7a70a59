// Package spec says what a webhook subscription may ask for: the events
// there are, the formats, and which names, URLs and teams are well formed.
// Both the configuration ([[webhooks]]) and the API check subscriptions
// with it, so both refuse the same things in the same words.
package spec

import (
	"fmt"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
)

// Event names. The family is the part before the dot.
const (
	JobQueued    = "job.queued"
	JobStarted   = "job.started"
	JobCompleted = "job.completed"
	JobFailed    = "job.failed"
	JobCancelled = "job.cancelled"
	JobRequeued  = "job.requeued"
	// JobPreempted: the job's attempt was stopped to make room for another
	// team's job (or one of higher priority) and the job is back in the
	// queue.
	JobPreempted = "job.preempted"
	// JobApprovalRequested: an approval rule held the job at submit;
	// JobApproved and JobRejected: a lead (or an admin) decided on it.
	JobApprovalRequested = "job.approval_requested"
	// JobReleased: every job it depended on ended as it asked; the
	// waiting job joined the queue.
	JobReleased = "job.released"
	JobApproved = "job.approved"
	JobRejected = "job.rejected"
	// CheckpointSaved: a complete checkpoint of the job was kept.
	CheckpointSaved = "checkpoint.saved"
	WorkerOffline   = "worker.offline"
	WorkerOnline    = "worker.online"
	GPUUnhealthy    = "gpu.unhealthy"
)

// Event describes one event for the documentation and the API.
type Event struct {
	Name string `json:"name"`
	What string `json:"description"`
}

// Events lists every event, in the order the documentation shows them.
var Events = []Event{
	{JobQueued, "a job was submitted"},
	{JobStarted, "its worker started the job (an attempt was acknowledged)"},
	{JobCompleted, "the job finished successfully"},
	{JobFailed, "the job failed (the trainer failed, it timed out, or its worker was lost with no retry left)"},
	{JobCancelled, "the job was cancelled"},
	{JobRequeued, "an attempt ended and the job is back in the queue (the reason says why: worker lost, GPU fault, not acknowledged)"},
	{JobPreempted, "the job's attempt was stopped to make room for another team's job (or one of higher priority); the job is back in the queue"},
	{JobReleased, "every job the waiting job depended on ended as it asked (depends_on): it joined the queue"},
	{JobApprovalRequested, "an approval rule held the job at submit: it waits for a lead of its team (or an admin) to approve it (approval names the rule and why)"},
	{JobApproved, "the held job was approved (approval.by names who); job.queued follows"},
	{JobRejected, "the held job was rejected (approval.by and approval.reason say who and why); job.cancelled follows"},
	{CheckpointSaved, "a complete checkpoint of the job was kept (every file checked): a retry resumes from it"},
	{WorkerOffline, "a worker went offline"},
	{WorkerOnline, "an offline worker is back"},
	{GPUUnhealthy, "a worker fenced one of its GPUs as unhealthy"},
}

// Names lists the event names.
func Names() []string {
	out := make([]string, len(Events))
	for i, e := range Events {
		out[i] = e.Name
	}
	return out
}

// Known reports whether name is an event.
func Known(name string) bool { return slices.Contains(Names(), name) }

// Family is an event's family: "job" of "job.failed".
func Family(name string) string {
	f, _, _ := strings.Cut(name, ".")
	return f
}

// families lists the families, each once.
func families() []string {
	var out []string
	for _, e := range Events {
		if f := Family(e.Name); !slices.Contains(out, f) {
			out = append(out, f)
		}
	}
	return out
}

// Formats of the requests.
const (
	FormatJSON  = "json"  // the event as JSON
	FormatSlack = "slack" // a Slack (or Mattermost, Discord /slack) incoming-webhook message
)

// DefaultTeam is the team of every job until jobs have teams.
const DefaultTeam = "default"

// MinSecret is the shortest signing secret a subscription may have.
const MinSecret = 16

// CheckFilter checks one entry of a subscription's events: an event name,
// "*" (every event) or a family ("job.*").
func CheckFilter(f string) error {
	if f == "*" || Known(f) {
		return nil
	}
	if fam, ok := strings.CutSuffix(f, ".*"); ok && slices.Contains(families(), fam) {
		return nil
	}
	return fmt.Errorf("unknown event %q; events are %s, \"*\" or a family (%s)", f,
		strings.Join(Names(), ", "), strings.Join(familyFilters(), ", "))
}

func familyFilters() []string {
	var out []string
	for _, f := range families() {
		out = append(out, f+".*")
	}
	return out
}

// Wants reports whether a subscription's events take the event name.
func Wants(filters []string, name string) bool {
	return slices.Contains(filters, "*") || slices.Contains(filters, name) || slices.Contains(filters, Family(name)+".*")
}

// CheckFormat checks a format name.
func CheckFormat(f string) error {
	if f == FormatJSON || f == FormatSlack {
		return nil
	}
	return fmt.Errorf("unknown format %q; formats are %s and %s", f, FormatJSON, FormatSlack)
}

// CheckName checks a subscription's name: 1 to 64 letters, digits, ".", "_"
// or "-", starting with a letter or digit.
func CheckName(n string) error {
	if n == "" || len(n) > 64 {
		return fmt.Errorf("a name is 1 to 64 characters, got %d", len(n))
	}
	for i, r := range n {
		ok := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || i > 0 && (r == '.' || r == '_' || r == '-')
		if !ok {
			return fmt.Errorf("name %q: only letters, digits, \".\", \"_\" and \"-\", starting with a letter or digit", n)
		}
	}
	return nil
}

// CheckTeam checks a subscription's team: "" (every team), DefaultTeam, or
// one of teams (those of [[teams]]).
func CheckTeam(t string, teams []string) error {
	if t == "" || t == DefaultTeam || slices.Contains(teams, t) {
		return nil
	}
	known := append([]string{DefaultTeam}, teams...)
	return fmt.Errorf("unknown team %q; the teams are %s (or leave it empty for every team)", t, strings.Join(slices.Compact(slices.Sorted(slices.Values(known))), ", "))
}

// maxURL bounds a subscription's URL.
const maxURL = 2048

// CheckURL checks a receiver's URL: absolute http or https, a host, no
// credentials (the signature authenticates the orchestrator; a password in
// the URL would be shown wherever the URL is). Where the host is an IP
// address, it must be one the guard allows (see Guard); names are checked
// when they are resolved, at every connection.
func CheckURL(raw string, g Guard) error {
	if raw == "" {
		return fmt.Errorf("a URL is required")
	}
	if len(raw) > maxURL {
		return fmt.Errorf("a URL is at most %d characters", maxURL)
	}
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("not a URL")
	}
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		return fmt.Errorf("the scheme must be http or https, not %q", u.Scheme)
	case u.Host == "" || u.Hostname() == "":
		return fmt.Errorf("the URL names no host")
	case u.User != nil:
		return fmt.Errorf("the URL must not hold credentials (user:password@)")
	case u.Fragment != "":
		return fmt.Errorf("the URL must not have a #fragment")
	}
	port, err := urlPort(u)
	if err != nil {
		return err
	}
	if ip, err := netip.ParseAddr(strings.Trim(u.Hostname(), "[]")); err == nil {
		if why := g.RefusesAt(ip, port); why != "" {
			return fmt.Errorf("%s is %s", ip, why)
		}
	}
	return nil
}

// urlPort is the port a request to u connects to: the one it names (1 to
// 65535), else the scheme's.
func urlPort(u *url.URL) (uint16, error) {
	p := u.Port()
	if p == "" {
		if u.Scheme == "https" {
			return 443, nil
		}
		return 80, nil
	}
	n, err := strconv.ParseUint(p, 10, 16)
	if err != nil || n == 0 {
		return 0, fmt.Errorf("the port must be from 1 to 65535, got %s", p)
	}
	return uint16(n), nil
}

// Origin is a URL's scheme, host and port: what logs and audit records show
// of a receiver's URL, whose path may hold a secret (Slack's does).
func Origin(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return "(invalid URL)"
	}
	return u.Scheme + "://" + u.Host
}
