package e2etest

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Event is one recorded happening in a scenario's history.
type Event struct {
	At      time.Time
	Kind    string // submit, submit_refused, fault, claim, ack, attempt_end, transition, proc_start, proc_exit, wrap_start, wrap_exit
	Job     string
	Attempt string
	Detail  string
}

func (e Event) String() string {
	return fmt.Sprintf("%s %-13s %s/%s %s", e.At.Format("15:04:05.000000"), e.Kind, e.Job, e.Attempt, e.Detail)
}

// History records everything a scenario does and sees: submits and injected
// faults from the test, claims, acks, transitions and attempt ends from the
// orchestrator (audit log and job records), and the real start and exit of
// job processes (a /proc sampler every 10 ms plus a wrapper script that logs
// start and exit lines). Check then judges the whole history.
type History struct {
	T       testing.TB
	O       *Orch
	mu      sync.Mutex
	events  []Event
	jobs    []string
	sampler *Sampler
	file    string // the wrapper's log
	Final   map[string]map[string]any
	Audit   []AuditRecord
}

// AuditRecord is an audit log entry as the admin API returns it.
type AuditRecord struct {
	Seq      int64           `json:"seq"`
	Time     time.Time       `json:"time"`
	Actor    string          `json:"actor"`
	Action   string          `json:"action"`
	TargetID string          `json:"target_id"`
	Details  json.RawMessage `json:"details"`
}

// NewHistory starts recording (and sampling /proc every 10 ms) for o.
func NewHistory(t testing.TB, o *Orch) *History {
	dir := t.TempDir()
	h := &History{T: t, O: o, file: filepath.Join(dir, "procs.log")}
	// Jobs append to the file, whatever uid they run as.
	OpenToJobs(t, dir)
	if err := os.WriteFile(h.file, nil, 0o666); err != nil || os.Chmod(h.file, 0o666) != nil {
		t.Fatalf("history file: %v", err)
	}
	h.sampler = StartSampler(10*time.Millisecond, func(kind, job, attempt string, at time.Time) {
		h.add(Event{At: at, Kind: kind, Job: job, Attempt: attempt})
	})
	t.Cleanup(h.sampler.Stop)
	return h
}

func (h *History) add(e Event) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.events = append(h.events, e)
}

// Fault records an injected fault.
func (h *History) Fault(format string, args ...any) {
	h.add(Event{At: time.Now(), Kind: "fault", Detail: fmt.Sprintf(format, args...)})
}

// Submit submits a job; an accepted one (201) is recorded and must reach a
// terminal state. It returns the status code and the job id.
//
// Unless extra sets one, each job carries an hf_token of its own, which the
// secret scan then looks for everywhere.
func (h *History) Submit(config map[string]any, extra map[string]any) (int, string) {
	h.T.Helper()
	return h.submitTo(h.O, config, extra)
}

// SubmitAs is Submit with another token (a team's): the job is that
// token's team's.
func (h *History) SubmitAs(token string, config map[string]any, extra map[string]any) (int, string) {
	h.T.Helper()
	return h.submitTo(h.O.As(token), config, extra)
}

func (h *History) submitTo(o *Orch, config map[string]any, extra map[string]any) (int, string) {
	h.T.Helper()
	if _, ok := extra["hf_token"]; !ok {
		with := map[string]any{"hf_token": NewHFToken()}
		for k, v := range extra {
			with[k] = v
		}
		extra = with
	}
	st, id := o.TrySubmit(config, extra)
	if st == 201 {
		h.mu.Lock()
		h.jobs = append(h.jobs, id)
		h.mu.Unlock()
		h.add(Event{At: time.Now(), Kind: "submit", Job: id})
	} else {
		h.add(Event{At: time.Now(), Kind: "submit_refused", Detail: strconv.Itoa(st)})
	}
	return st, id
}

// SubmitReply submits like Submit and returns the whole reply as well (the
// detail of a refusal).
func (h *History) SubmitReply(body map[string]any) (int, map[string]any) {
	h.T.Helper()
	st, m := h.O.Do("POST", "/api/queue/submit", body)
	if st == 201 {
		id, _ := m["job_id"].(string)
		h.mu.Lock()
		h.jobs = append(h.jobs, id)
		h.mu.Unlock()
		h.add(Event{At: time.Now(), Kind: "submit", Job: id})
	} else {
		h.add(Event{At: time.Now(), Kind: "submit_refused", Detail: strconv.Itoa(st)})
	}
	return st, m
}

// Jobs returns the accepted job ids.
func (h *History) Jobs() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.jobs...)
}

// WrapperCommand is a job command that logs "start <job> <attempt> <ns>" and
// "exit <job> <attempt> <ns> <code>" around the demo trainer. A trainer killed
// with its whole group never writes its exit: the sampler covers that.
func (h *History) WrapperCommand() []string {
	script := fmt.Sprintf(`echo "start $SIMPLETUNER_JOB_ID $SIMPLETUNER_ATTEMPT $(date +%%s%%N)" >> %[1]s
%[2]s
rc=$?
echo "exit $SIMPLETUNER_JOB_ID $SIMPLETUNER_ATTEMPT $(date +%%s%%N) $rc" >> %[1]s
exit $rc`, h.file, DemoTrainer())
	return []string{"/bin/sh", "-c", script}
}

// ExecWrapperCommand logs the start line and then execs the demo trainer, so
// the trainer is the worker's direct child (its exit shows only in the samples).
func (h *History) ExecWrapperCommand() []string {
	script := fmt.Sprintf(`echo "start $SIMPLETUNER_JOB_ID $SIMPLETUNER_ATTEMPT $(date +%%s%%N)" >> %[1]s
exec %[2]s`, h.file, DemoTrainer())
	return []string{"/bin/sh", "-c", script}
}

// WaitAllTerminal waits until every accepted job is terminal.
func (h *History) WaitAllTerminal(timeout time.Duration) {
	h.T.Helper()
	deadline := time.Now().Add(timeout)
	for {
		pending := ""
		for _, id := range h.Jobs() {
			if j := h.O.Job(id); j == nil || !terminal(j["status"]) {
				pending = fmt.Sprintf("%s %v", id, j["status"])
				break
			}
		}
		if pending == "" {
			return
		}
		if time.Now().After(deadline) {
			h.Finish()
			h.Dump()
			h.T.Fatalf("timed out after %s waiting for every accepted job to end; %s still pending", timeout, pending)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func terminal(s any) bool {
	return s == "completed" || s == "failed" || s == "cancelled"
}

// Finish stops sampling once no process of a terminal job is left (or after
// 10 s) and collects the orchestrator's side: audit log and job records.
func (h *History) Finish() {
	h.T.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if len(h.liveJobProcs()) == 0 {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(30 * time.Millisecond)
	h.sampler.Stop()
	h.Final = map[string]map[string]any{}
	for _, id := range h.Jobs() {
		j := h.O.Job(id)
		if j == nil {
			h.T.Fatalf("job %s unreadable", id)
		}
		h.Final[id] = j
		for _, a := range Attempts(j) {
			n := fmt.Sprint(a["attempt"])
			if t, ok := parseTime(a["dispatched_at"]); ok {
				h.add(Event{At: t, Kind: "claim", Job: id, Attempt: n, Detail: fmt.Sprint(a["worker_id"])})
			}
			if t, ok := parseTime(a["started_at"]); ok {
				h.add(Event{At: t, Kind: "ack", Job: id, Attempt: n})
			}
			if t, ok := parseTime(a["ended_at"]); ok {
				h.add(Event{At: t, Kind: "attempt_end", Job: id, Attempt: n, Detail: fmt.Sprint(a["outcome"])})
			}
		}
	}
	h.Audit = h.readAudit()
	for _, r := range h.Audit {
		switch r.Action {
		case "job.transition":
			var d map[string]any
			_ = json.Unmarshal(r.Details, &d)
			h.add(Event{At: r.Time, Kind: "transition", Job: r.TargetID, Attempt: fmt.Sprint(d["attempt"]),
				Detail: fmt.Sprintf("%v→%v %s", d["from"], d["to"], string(r.Details))})
		case "job.dispatch":
			h.add(Event{At: r.Time, Kind: "dispatch_audit", Detail: r.TargetID})
		}
	}
	if f, err := os.Open(h.file); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			fs := strings.Fields(sc.Text())
			if len(fs) < 4 {
				continue
			}
			ns, _ := strconv.ParseInt(fs[3], 10, 64)
			detail := ""
			if len(fs) > 4 {
				detail = "rc=" + fs[4]
			}
			h.add(Event{At: time.Unix(0, ns), Kind: "wrap_" + fs[0], Job: fs[1], Attempt: fs[2], Detail: detail})
		}
		f.Close()
	}
	h.mu.Lock()
	sort.SliceStable(h.events, func(i, j int) bool { return h.events[i].At.Before(h.events[j].At) })
	h.mu.Unlock()
}

// mine is the set of this history's jobs.
func (h *History) mine() map[string]bool {
	mine := map[string]bool{}
	for _, id := range h.Jobs() {
		mine[id] = true
	}
	return mine
}

func (h *History) liveJobProcs() []JobProc {
	mine := h.mine()
	var out []JobProc
	for _, p := range AllJobProcs() {
		if mine[p.Job] {
			out = append(out, p)
		}
	}
	return out
}

func parseTime(v any) (time.Time, bool) {
	s, ok := v.(string)
	if !ok {
		return time.Time{}, false
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	return t, err == nil
}

func (h *History) readAudit() []AuditRecord {
	var out []AuditRecord
	since := int64(0)
	for {
		body, err := HTTPGet(fmt.Sprintf("%s/api/admin/audit?since=%d&limit=1000", h.O.URL, since), h.O.Admin)
		if err != nil {
			h.T.Fatalf("audit: %v", err)
		}
		ScanForSecrets(h.T, "the audit log", body)
		var page struct {
			Records []AuditRecord `json:"records"`
		}
		if err := json.Unmarshal([]byte(body), &page); err != nil {
			h.T.Fatalf("audit: %v: %.200s", err, body)
		}
		out = append(out, page.Records...)
		if len(page.Records) < 1000 {
			return out
		}
		since = page.Records[len(page.Records)-1].Seq
	}
}

// Events returns the recorded history in time order (after Finish).
func (h *History) Events() []Event {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]Event(nil), h.events...)
}

// Expect says what a scenario's history must show besides the invariants
// that always hold.
type Expect struct {
	MinStaleRejections int64 // the metric must reach this (needs OrchOptions.Metrics)
	MaxRequeues        int   // -1: no limit beyond max_retries; otherwise the most requeues (withdrawn included) in all
	Statuses           []string
}

// Summary is what Check measured.
type Summary struct {
	Jobs, Attempts, Requeues, Withdrawn, Preempted, RetriesSpent int
	ByStatus                                                     map[string]int
	StaleRejections                                              int64
	Samples                                                      int
}

func (s Summary) String() string {
	return fmt.Sprintf("jobs=%d attempts=%d requeues=%d (withdrawn %d, preempted %d, retries spent %d) final=%v stale_rejections=%d proc_samples=%d",
		s.Jobs, s.Attempts, s.Requeues, s.Withdrawn, s.Preempted, s.RetriesSpent, s.ByStatus, s.StaleRejections, s.Samples)
}

// Check judges the history (call Finish first):
//   - every accepted job was submitted once and reached exactly one terminal state;
//   - no terminal state was overwritten (no transition out of one, the final
//     status is the one terminal transition's);
//   - no two attempts of a job ran at once, by the /proc samples and by the
//     wrapper's start/exit lines;
//   - requeues that spent a retry ≤ max_retries and equal retries_used;
//   - no process of a finished job is left;
//   - whatever exp adds.
func (h *History) Check(exp Expect) Summary {
	h.T.Helper()
	sum := Summary{ByStatus: map[string]int{}, Samples: h.sampler.Samples()}
	submits := map[string]int{}
	terminals := map[string][]string{}
	requeues := map[string]int{}
	spent := map[string]int{}
	for _, r := range h.Audit {
		switch r.Action {
		case "job.submit":
			submits[r.TargetID]++
		case "job.transition":
			var d struct {
				From, To, Outcome string
				RetrySpent        bool `json:"retry_spent"`
			}
			_ = json.Unmarshal(r.Details, &d)
			if terminal(d.From) {
				h.T.Errorf("job %s: terminal state %s overwritten by %s (audit seq %d)", r.TargetID, d.From, d.To, r.Seq)
			}
			if terminal(d.To) {
				terminals[r.TargetID] = append(terminals[r.TargetID], d.To)
			}
			if d.To == "queued" && d.From != "queued" {
				requeues[r.TargetID]++
				sum.Requeues++
				switch {
				case d.Outcome == "withdrawn" && !d.RetrySpent:
					sum.Withdrawn++
				case d.Outcome == "preempted":
					// Preemption never costs the job a retry.
					sum.Preempted++
					if d.RetrySpent {
						h.T.Errorf("job %s: preempted requeue spent a retry (audit seq %d)", r.TargetID, r.Seq)
					}
				case d.RetrySpent:
					spent[r.TargetID]++
					sum.RetriesSpent++
				default:
					// Requeued at no cost by the lifecycle's own account: an
					// eviction, a GPU fault, a worker stopped on purpose.
				}
			}
		}
	}
	for _, id := range h.Jobs() {
		j := h.Final[id]
		sum.Jobs++
		st, _ := j["status"].(string)
		sum.ByStatus[st]++
		if submits[id] != 1 {
			h.T.Errorf("job %s: %d job.submit audit records, want 1", id, submits[id])
		}
		if !terminal(st) {
			h.T.Errorf("job %s: accepted but ended %q, not terminal", id, st)
		}
		if len(terminals[id]) != 1 {
			h.T.Errorf("job %s: %d terminal transitions %v, want exactly 1", id, len(terminals[id]), terminals[id])
		} else if terminals[id][0] != st {
			h.T.Errorf("job %s: terminal transition to %s but the job now says %s", id, terminals[id][0], st)
		}
		maxRetries, _ := j["max_retries"].(float64)
		used, _ := j["retries_used"].(float64)
		if spent[id] > int(maxRetries) {
			h.T.Errorf("job %s: %d retries spent > max_retries %v", id, spent[id], maxRetries)
		}
		if spent[id] != int(used) {
			h.T.Errorf("job %s: audit shows %d retries spent, job says retries_used %v", id, spent[id], used)
		}
		at := Attempts(j)
		sum.Attempts += len(at)
		for i, a := range at {
			if a["attempt"] != float64(i+1) {
				h.T.Errorf("job %s: attempt %d numbered %v", id, i+1, a["attempt"])
			}
			if a["ended_at"] == nil || a["outcome"] == nil {
				h.T.Errorf("job %s: attempt %v never ended though the job is %s", id, a["attempt"], st)
			}
		}
		if len(exp.Statuses) > 0 && !contains(exp.Statuses, st) {
			h.T.Errorf("job %s ended %s, want one of %v", id, st, exp.Statuses)
		}
	}
	if exp.MaxRequeues >= 0 && sum.Requeues > exp.MaxRequeues {
		h.T.Errorf("%d requeues, want at most %d", sum.Requeues, exp.MaxRequeues)
	}
	mine := h.mine()
	if ov := h.sampler.Overlaps(func(job string) bool { return mine[job] }); len(ov) > 0 {
		h.T.Errorf("%d samples saw two attempts of a job alive together; first: %s; last: %s", len(ov), ov[0], ov[len(ov)-1])
	}
	if sh := h.sampler.GPUShares(func(job string) bool { return mine[job] }); len(sh) > 0 {
		h.T.Errorf("%d samples saw one GPU held by two live attempts; first: %s; last: %s", len(sh), sh[0], sh[len(sh)-1])
	}
	h.checkSpans(mine)
	if left := h.liveJobProcs(); len(left) > 0 {
		h.T.Errorf("processes of finished jobs still alive: %v", left)
	}
	if h.O.MetricsURL != "" {
		sum.StaleRejections = h.O.Metric("simpletuner_stale_attempt_rejections_total")
	}
	if exp.MinStaleRejections > 0 && sum.StaleRejections < exp.MinStaleRejections {
		h.T.Errorf("stale attempt rejections %d, want ≥ %d: no stale write was refused", sum.StaleRejections, exp.MinStaleRejections)
	}
	if h.T.Failed() {
		h.Dump()
	}
	return sum
}

// checkSpans compares the attempts' real lives: the stretches in which an
// attempt ran (sampled, widened by its wrapper's start and exit lines) must
// not overlap another attempt's, and attempt n+1 must first run after attempt
// n first ran. A frozen attempt (stopped processes run nothing) may run again
// after it thaws; it still must not run beside another attempt.
func (h *History) checkSpans(mine map[string]bool) {
	type life struct {
		first, last time.Time
		lives       []Interval
	}
	lives := map[string]map[int]*life{}
	get := func(job, attempt string) *life {
		n, err := strconv.Atoi(attempt)
		if err != nil || !mine[job] {
			return nil
		}
		if lives[job] == nil {
			lives[job] = map[int]*life{}
		}
		if lives[job][n] == nil {
			lives[job][n] = &life{}
		}
		return lives[job][n]
	}
	for _, sp := range h.sampler.Spans() {
		if l := get(sp.Job, sp.Attempt); l != nil {
			l.lives = append(l.lives, sp.Lives...)
		}
	}
	for _, e := range h.Events() {
		l := (*life)(nil)
		if e.Kind == "wrap_start" || e.Kind == "wrap_exit" {
			l = get(e.Job, e.Attempt)
		}
		if l == nil {
			continue
		}
		switch {
		case len(l.lives) == 0:
			l.lives = []Interval{{e.At, e.At}}
		case e.Kind == "wrap_start" && e.At.Before(l.lives[0].From):
			l.lives[0].From = e.At
		case e.Kind == "wrap_exit" && e.At.After(l.lives[len(l.lives)-1].To):
			l.lives[len(l.lives)-1].To = e.At
		}
	}
	for job, ls := range lives {
		var ns []int
		for n, l := range ls {
			if len(l.lives) == 0 {
				continue
			}
			sort.Slice(l.lives, func(i, j int) bool { return l.lives[i].From.Before(l.lives[j].From) })
			l.first, l.last = l.lives[0].From, l.lives[len(l.lives)-1].To
			ns = append(ns, n)
		}
		sort.Ints(ns)
		for i := 1; i < len(ns); i++ {
			if a, b := ls[ns[i-1]], ls[ns[i]]; !b.first.After(a.first) {
				h.T.Errorf("job %s: attempt %d first ran at %s, not after attempt %d first ran at %s", job,
					ns[i], b.first.Format("15:04:05.000"), ns[i-1], a.first.Format("15:04:05.000"))
			}
		}
		for i := range ns {
			for j := i + 1; j < len(ns); j++ {
				a, b := ls[ns[i]], ls[ns[j]]
				for _, x := range a.lives {
					for _, y := range b.lives {
						if x.Overlaps(y) {
							h.T.Errorf("job %s: attempt %d ran %s–%s while attempt %d ran %s–%s", job,
								ns[i], x.From.Format("15:04:05.000"), x.To.Format("15:04:05.000"),
								ns[j], y.From.Format("15:04:05.000"), y.To.Format("15:04:05.000"))
						}
					}
				}
			}
		}
	}
}

// Dump logs the whole history.
func (h *History) Dump() {
	var b strings.Builder
	for _, e := range h.Events() {
		b.WriteString(e.String())
		b.WriteByte('\n')
	}
	h.T.Logf("history:\n%s", b.String())
}

// Count returns how many events of kind the history holds.
func (h *History) Count(kind string) int {
	n := 0
	for _, e := range h.Events() {
		if e.Kind == kind {
			n++
		}
	}
	return n
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}
