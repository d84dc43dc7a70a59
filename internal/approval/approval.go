// Package approval decides which submitted jobs wait for a person's
// approval. Rules are checked in order at submit; the first whose every
// condition matches holds the job (in state pending_approval) and names
// itself and what matched. It decides and never acts: no I/O, no store.
package approval

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"path"
	"slices"
	"strconv"
	"strings"
)

// Approvers: who may decide on a job a rule held.
const (
	ApproverLead  = "lead"  // a lead of the job's team, or an admin
	ApproverAdmin = "admin" // an admin only
)

// Conditions are what a rule looks at; every one set must match (a zero
// value is unset). They are stored as this JSON object.
type Conditions struct {
	// GPUsOver holds a job asking for more GPUs than this (a whole-worker
	// job counts the largest worker's GPUs).
	GPUsOver int `json:"gpus_over,omitempty"`
	// WholeWorker holds a job asking for a whole worker.
	WholeWorker bool `json:"whole_worker,omitempty"`
	// GPUHoursOver holds a job whose estimated GPU-hours exceed this: its
	// GPUs times max_train_steps (from its config) times SecondsPerStep,
	// or times its timeout_seconds when either is unknown. A job with
	// neither is held: its cost cannot be bounded.
	GPUHoursOver   float64 `json:"gpu_hours_over,omitempty"`
	SecondsPerStep float64 `json:"seconds_per_step,omitempty"`
	// ConfigGlob holds a job whose config name matches this glob
	// (path.Match: "*", "?", "[a-z]"; "*" does not cross "/").
	ConfigGlob string `json:"config_glob,omitempty"`
	// FirstJob holds the first job a submitter ever sends.
	FirstJob bool `json:"first_job,omitempty"`
	// Team holds the jobs of this team.
	Team string `json:"team,omitempty"`
	// JobsPerDayOver holds a submitter's jobs beyond this many in one UTC
	// day.
	JobsPerDayOver int `json:"jobs_per_day_over,omitempty"`
}

// Rule is a named set of conditions and who decides on what it holds.
type Rule struct {
	ID       string
	Name     string
	Approver string // ApproverLead ("" too) or ApproverAdmin
	Conditions
}

// Facts are what the rules read of a submitted job and its submitter.
type Facts struct {
	GPUs        int // the GPUs asked for; 0 with WholeWorker
	WholeWorker bool
	ConfigName  string
	Team        string
	Config      json.RawMessage // the job's config, for max_train_steps
	// TimeoutSeconds is the job's limit (0: none).
	TimeoutSeconds int
	// Submitter is the job's actor ("person:p_…", "admin:tok_…").
	Submitter string
	// SubmittedEver and SubmittedToday count the submitter's earlier jobs,
	// in all and on this UTC day (this one not included).
	SubmittedEver, SubmittedToday int
	// LargestWorkerGPUs is the most GPUs one worker has.
	LargestWorkerGPUs int
}

// Counted reports whether any rule needs the submitter's counts, which
// cost a read of the store.
func Counted(rules []Rule) bool {
	for _, r := range rules {
		if r.FirstJob || r.JobsPerDayOver > 0 {
			return true
		}
	}
	return false
}

// Match returns the first rule that holds the job, with what matched, or
// nil when none does.
func Match(rules []Rule, f Facts) (*Rule, string) {
	for i := range rules {
		if why, ok := rules[i].matches(f); ok {
			return &rules[i], why
		}
	}
	return nil, ""
}

// matches checks every condition set; all must match.
func (r Rule) matches(f Facts) (string, bool) {
	var why []string
	check := func(set bool, ok bool, reason string) bool {
		if !set {
			return true
		}
		if ok {
			why = append(why, reason)
		}
		return ok
	}
	gpus := f.GPUs
	if f.WholeWorker {
		gpus = f.LargestWorkerGPUs
	}
	hours, known := EstimateGPUHours(f, r.SecondsPerStep)
	ok := check(r.GPUsOver > 0, gpus > r.GPUsOver, fmt.Sprintf("asks for %d GPUs, more than %d", gpus, r.GPUsOver)) &&
		check(r.WholeWorker, f.WholeWorker, "asks for a whole worker") &&
		check(r.GPUHoursOver > 0, !known || hours > r.GPUHoursOver, hoursReason(hours, known, r.GPUHoursOver)) &&
		check(r.ConfigGlob != "", globMatch(r.ConfigGlob, f.ConfigName), fmt.Sprintf("config %q matches %q", f.ConfigName, r.ConfigGlob)) &&
		check(r.FirstJob, f.SubmittedEver == 0, "the first job of "+f.Submitter) &&
		check(r.Team != "", normalTeam(f.Team) == normalTeam(r.Team), "a job of team "+normalTeam(f.Team)) &&
		check(r.JobsPerDayOver > 0, f.SubmittedToday+1 > r.JobsPerDayOver,
			fmt.Sprintf("job %d of %s today, more than %d a day", f.SubmittedToday+1, f.Submitter, r.JobsPerDayOver))
	if !ok || len(why) == 0 {
		return "", false
	}
	return strings.Join(why, "; "), true
}

func hoursReason(hours float64, known bool, over float64) string {
	if !known {
		return "its GPU-hours cannot be estimated (no max_train_steps with seconds_per_step, and no timeout_seconds)"
	}
	return fmt.Sprintf("an estimated %s GPU-hours, more than %s", trim(hours), trim(over))
}

func trim(f float64) string { return strconv.FormatFloat(math.Round(f*100)/100, 'f', -1, 64) }

func normalTeam(t string) string {
	if t == "" {
		return "default"
	}
	return t
}

func globMatch(glob, name string) bool {
	ok, err := path.Match(glob, name)
	return err == nil && ok
}

// EstimateGPUHours estimates a job's GPU-hours: its GPUs times its
// max_train_steps times secondsPerStep, or times its timeout when either
// is unknown. known is false when neither gives a duration.
func EstimateGPUHours(f Facts, secondsPerStep float64) (hours float64, known bool) {
	gpus := f.GPUs
	if f.WholeWorker {
		gpus = max(f.LargestWorkerGPUs, 1)
	}
	if steps, ok := MaxTrainSteps(f.Config); ok && secondsPerStep > 0 {
		return float64(gpus) * float64(steps) * secondsPerStep / 3600, true
	}
	if f.TimeoutSeconds > 0 {
		return float64(gpus) * float64(f.TimeoutSeconds) / 3600, true
	}
	return 0, false
}

// MaxTrainSteps reads max_train_steps from a SimpleTuner config, under
// either spelling of the key ("max_train_steps", "--max_train_steps"), as
// a number or a string of digits.
func MaxTrainSteps(config json.RawMessage) (int64, bool) {
	var m map[string]any
	if json.Unmarshal(config, &m) != nil {
		return 0, false
	}
	for _, key := range []string{"max_train_steps", "--max_train_steps"} {
		switch v := m[key].(type) {
		case float64:
			if v > 0 {
				return int64(v), true
			}
		case string:
			if n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64); err == nil && n > 0 {
				return n, true
			}
		}
	}
	return 0, false
}

// Check reports what is wrong with a rule, each problem naming its field;
// teams are the teams a rule may name ("default" always).
func (r Rule) Check(teams []string) error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if err := CheckName(r.Name); err != nil {
		bad("name: %v", err)
	}
	if r.Approver != "" && r.Approver != ApproverLead && r.Approver != ApproverAdmin {
		bad("approver: want %q or %q, got %q", ApproverLead, ApproverAdmin, r.Approver)
	}
	c := r.Conditions
	if c.GPUsOver < 0 {
		bad("gpus_over: must not be negative, got %d", c.GPUsOver)
	}
	if c.GPUHoursOver < 0 || math.IsNaN(c.GPUHoursOver) || math.IsInf(c.GPUHoursOver, 0) {
		bad("gpu_hours_over: must be a positive number, got %v", c.GPUHoursOver)
	}
	if c.SecondsPerStep < 0 || math.IsNaN(c.SecondsPerStep) || math.IsInf(c.SecondsPerStep, 0) {
		bad("seconds_per_step: must be a positive number, got %v", c.SecondsPerStep)
	}
	if c.SecondsPerStep > 0 && c.GPUHoursOver == 0 {
		bad("seconds_per_step: only means something with gpu_hours_over")
	}
	if c.JobsPerDayOver < 0 {
		bad("jobs_per_day_over: must not be negative, got %d", c.JobsPerDayOver)
	}
	if c.ConfigGlob != "" {
		if _, err := path.Match(c.ConfigGlob, ""); err != nil {
			bad("config_glob: %q is not a valid glob: %v", c.ConfigGlob, err)
		}
	}
	if c.Team != "" && c.Team != "default" && !slices.Contains(teams, c.Team) {
		known := []string{"default"}
		for _, t := range teams {
			if !slices.Contains(known, t) {
				known = append(known, t)
			}
		}
		bad("team: %q is not a [[teams]] name (teams: %s)", c.Team, strings.Join(known, ", "))
	}
	if c == (Conditions{SecondsPerStep: c.SecondsPerStep}) {
		bad("set at least one condition (gpus_over, whole_worker, gpu_hours_over, config_glob, first_job, team, jobs_per_day_over)")
	}
	return errors.Join(errs...)
}

// CheckName checks a rule's name: 1 to 64 letters, digits, ".", "_" or
// "-", starting with a letter or digit.
func CheckName(n string) error {
	if n == "" || len(n) > 64 {
		return fmt.Errorf("a name is 1 to 64 characters, got %d", len(n))
	}
	for i, c := range n {
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || i > 0 && (c == '.' || c == '_' || c == '-')
		if !ok {
			return fmt.Errorf("%q: only letters, digits, \".\", \"_\" and \"-\", starting with a letter or digit", n)
		}
	}
	return nil
}

// Encode is a rule's conditions as stored.
func (c Conditions) Encode() json.RawMessage {
	b, _ := json.Marshal(c) // plain fields always marshal
	return b
}

// Decode reads stored conditions.
func Decode(raw json.RawMessage) (Conditions, error) {
	var c Conditions
	if len(raw) == 0 {
		return c, nil
	}
	err := json.Unmarshal(raw, &c)
	return c, err
}
