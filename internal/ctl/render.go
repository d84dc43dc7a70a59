package ctl

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/api"
	"github.com/simpletuner/simpletuner-orchestration/internal/audit"
	"github.com/simpletuner/simpletuner-orchestration/internal/ctl/output"
	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
)

// renderer turns API objects into the human tables. It is pure (the clock is
// given), so the golden tests drive it with recorded replies.
type renderer struct {
	now   time.Time
	style output.Styler
	wide  bool
}

// Column widths of the default tables, chosen so that a row fits in 79
// columns (an 80-column terminal without a wrap).
const (
	nameWidth   = 16
	configWidth = 18
	scopesWidth = 16
	// tokenTeamWidth bounds the team column of the token list.
	tokenTeamWidth = 10
	pathWidth      = 44
)

func (r renderer) age(s *string) string { return output.Age(r.now, output.ParseTime(s)) }

func (r renderer) workers(w io.Writer, ws []Worker) error {
	var t *output.Table
	if r.wide {
		t = output.NewTable("NAME", "ID", r.style.Header("STATUS"), "TYPE", "GPUS", "GPU", "JOBS", "SEEN", "UPTIME", "AGENT", "LABELS")
	} else {
		t = output.NewTable("NAME", "ID", r.style.Header("STATUS"), "GPUS", "JOB", "SEEN")
	}
	for _, wk := range ws {
		ids, extra := wk.Jobs()
		if r.wide {
			jobs := strings.Join(ids, ",")
			if extra > 0 {
				jobs += fmt.Sprintf("+%d", extra)
			}
			gpu := wk.GPUName
			if wk.GPUVRAMGB > 0 {
				gpu = strings.TrimSpace(fmt.Sprintf("%s %sGB", gpu, trimFloat(wk.GPUVRAMGB)))
			}
			uptime := ""
			if wk.UptimeSeconds != nil {
				uptime = output.Duration(time.Duration(*wk.UptimeSeconds * float64(time.Second)))
			}
			t.Row(wk.Name, wk.WorkerID, r.style.State(r.workerState(wk)), wk.WorkerType, wk.GPUsFreeText(), gpu, jobs,
				r.age(wk.LastHeartbeat), uptime, agentText(wk), labelsText(wk.Labels))
			continue
		}
		job := ""
		if len(ids) > 0 {
			job = ids[0]
		}
		if n := len(ids) - 1 + extra; n > 0 {
			job += fmt.Sprintf("+%d", n)
		}
		t.Row(output.Truncate(wk.Name, nameWidth), wk.WorkerID, r.style.State(r.workerState(wk)), wk.gpusFree(), job, r.age(wk.LastHeartbeat))
	}
	return t.Write(w)
}

// workerState is the status as workerStatusText words it, marked when the
// stream is down although the store still says the worker is up.
func (r renderer) workerState(wk Worker) string {
	if !wk.Connected && (wk.Status == "idle" || wk.Status == "partial" || wk.Status == "busy") {
		return wk.Status + "?"
	}
	return workerStatusText(wk.Status)
}

// workerStatusText words a worker status for people: "connecting", the
// API's status of a worker created and never connected, reads as what it is.
// -o json and --status keep the API's words.
func workerStatusText(status string) string {
	if status == "connecting" {
		return "never connected"
	}
	return status
}

func agentText(wk Worker) string {
	switch {
	case wk.Protocol >= 2 && wk.AgentVersion != "":
		return fmt.Sprintf("workerd %s (p%d)", wk.AgentVersion, wk.Protocol)
	case wk.Protocol >= 2:
		return fmt.Sprintf("workerd (p%d)", wk.Protocol)
	case wk.Protocol == 1:
		return "agent (p1)"
	}
	return ""
}

func trimFloat(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) }

func (r renderer) worker(w io.Writer, wk Worker) error {
	ids, extra := wk.Jobs()
	jobs := strings.Join(ids, ", ")
	if extra > 0 {
		jobs = strings.TrimPrefix(jobs+fmt.Sprintf(", +%d more", extra), ", ")
	}
	gpu := fmt.Sprintf("%s free/total", wk.gpusFree())
	if out := wk.GPUsOut(); out != "" {
		gpu += " (" + out + ")"
	}
	if wk.GPUName != "" {
		gpu += fmt.Sprintf(", %s", wk.GPUName)
	}
	if wk.GPUVRAMGB > 0 {
		gpu += fmt.Sprintf(", %s GB each", trimFloat(wk.GPUVRAMGB))
	}
	connected := "no"
	if wk.Connected {
		connected = "yes"
		if wk.UptimeSeconds != nil {
			connected += ", for " + output.Duration(time.Duration(*wk.UptimeSeconds*float64(time.Second)))
		}
	}
	kv := [][2]string{
		{"Worker", wk.WorkerID},
		{"Name", wk.Name},
		{"Status", r.style.State(r.workerState(wk))},
		{"Type", wk.WorkerType},
		{"Connected", connected},
		{"GPUs", gpu},
		{"Jobs", jobs},
		{"Last heartbeat", timeAndAge(r, wk.LastHeartbeat)},
		{"Created", timeAndAge(r, &wk.CreatedAt)},
		{"Agent", agentText(wk)},
		{"Isolation", wk.Capabilities.Isolation},
		{"Provider", deref(wk.Provider)},
		{"Labels", labelsText(wk.Labels)},
	}
	if wk.Local {
		kv = append(kv, [2]string{"Local", "yes (attached through the admin socket)"})
	}
	if err := writeKV(w, kv); err != nil {
		return err
	}
	return r.workerGPUs(w, wk)
}

// workerGPUs is the worker's GPUs one by one: health and the latest
// numbers, then, for a GPU held back or fenced, why and since when.
func (r renderer) workerGPUs(w io.Writer, wk Worker) error {
	live := map[int]protocol.GPUTelemetry{}
	if wk.GPUTelemetry != nil {
		for _, g := range wk.GPUTelemetry.GPUs {
			live[g.Index] = g
		}
	}
	conds := map[int]api.GPUCondition{}
	for _, c := range wk.GPUConditions {
		conds[c.Index] = c
	}
	if len(live) == 0 && len(conds) == 0 {
		return nil
	}
	fmt.Fprintln(w)
	head := []string{"GPU", "HEALTH", "UTIL", "MEMORY", "TEMP", "POWER"}
	if r.wide {
		head = append(head, "UUID")
	}
	t := output.NewTable(head...)
	for i := range wk.GPUCount {
		g := live[i]
		health, _, _ := strings.Cut(g.Health, ":")
		uuid := g.UUID
		if c, ok := conds[i]; ok {
			health, uuid = c.State, c.UUID
		}
		row := []string{strconv.Itoa(i), health, "", "", "", ""}
		if _, ok := live[i]; ok {
			row[2], row[3], row[4] = fmt.Sprintf("%.0f%%", g.UtilizationPct), fmt.Sprintf("%.1f/%.1f GiB", float64(g.MemoryUsedMiB)/1024, float64(g.MemoryTotalMiB)/1024), fmt.Sprintf("%.0f°C", g.TemperatureC)
			if g.PowerW > 0 {
				row[5] = fmt.Sprintf("%.0f W", g.PowerW)
			}
		}
		if r.wide {
			row = append(row, uuid)
		}
		t.Row(row...)
	}
	if err := t.Write(w); err != nil {
		return err
	}
	for i := range wk.GPUCount {
		if c, ok := conds[i]; ok {
			clearing := ""
			if c.Clearing {
				clearing = "; an admin cleared it, the worker is taking it back"
			}
			fmt.Fprintf(w, "GPU %d %s since %s: %s%s\n", i, workerText(c.State), r.age(&c.Since), workerText(c.Reason), clearing)
		} else if h := live[i].Health; h != "" && h != "ok" {
			fmt.Fprintf(w, "GPU %d: %s\n", i, workerText(h))
		}
	}
	return nil
}

// workerText is text a worker reported (a GPU's condition or health, a
// driver's error), shown on one line with its control characters escaped.
func workerText(s string) string { return output.Sanitize(oneLine(s)) }

func timeAndAge(r renderer, s *string) string {
	t := output.ParseTime(s)
	if t.IsZero() {
		return ""
	}
	return fmt.Sprintf("%s (%s ago)", t.UTC().Format(time.RFC3339), output.Age(r.now, t))
}

// writeKV prints "Key:  value" lines, skipping empty values.
func writeKV(w io.Writer, kv [][2]string) error {
	width := 0
	for _, p := range kv {
		width = max(width, len(p[0]))
	}
	for _, p := range kv {
		if p[1] == "" {
			continue
		}
		if _, err := fmt.Fprintf(w, "%-*s  %s\n", width+1, p[0]+":", output.Sanitize(p[1])); err != nil {
			return err
		}
	}
	return nil
}

// checkpointText is the job's newest complete checkpoint: a retry resumes
// from it.
func checkpointText(r renderer, j Job) string {
	c := j.Checkpoint
	switch {
	case !j.Checkpoints:
		return "off (submitted with checkpoints false)"
	case c == nil:
		return ""
	}
	files := "files"
	if len(c.Files) == 1 {
		files = "file"
	}
	if !r.wide {
		return fmt.Sprintf("%s (step %d, %s) %s ago", c.Name, c.Step, humanBytes(c.Bytes), r.age(&c.CreatedAt))
	}
	return fmt.Sprintf("%s (step %d, %s, %d %s, kept by attempt %d at %s; %d kept)", c.Name, c.Step, humanBytes(c.Bytes),
		len(c.Files), files, c.Attempt, c.CreatedAt, j.CheckpointsKept)
}

func configText(j Job) string {
	if j.ConfigName != nil && *j.ConfigName != "" {
		return *j.ConfigName
	}
	return "(inline)"
}

func (r renderer) jobs(w io.Writer, js []Job) error {
	var t *output.Table
	if r.wide {
		t = output.NewTable("ID", r.style.Header("STATUS"), "PRI", "TEAM", "CONFIG", "TARGET", "GPUS", "VRAM", "LABELS", "WORKER",
			"ATTEMPT", "RETRIES", "BY", "QUEUED", "STARTED", "ENDED", "NOTE")
	} else {
		t = output.NewTable("ID", r.style.Header("STATUS"), "PRI", "CONFIG", "WORKER", "AGE")
	}
	for _, j := range js {
		if r.wide {
			vram := ""
			if j.MinVRAMGB > 0 {
				vram = trimFloat(j.MinVRAMGB) + "GB"
			}
			note := deref(j.Error)
			if j.Status == "queued" || j.Status == "waiting" {
				note = first(j.WaitingDetail, j.WaitingReason)
			}
			t.Row(j.JobID, r.style.State(j.Status), strconv.Itoa(j.Priority), first(j.Team, "default"), configText(j), j.Target, gpusText(j), vram,
				labelsText(j.WorkerLabels), deref(j.WorkerID), strconv.Itoa(j.Attempt), fmt.Sprintf("%d/%d", j.RetriesUsed, j.MaxRetries),
				j.SubmittedBy, r.age(&j.QueuedAt), r.age(j.StartedAt), r.age(j.CompletedAt), note)
			continue
		}
		t.Row(j.JobID, r.style.State(j.Status), strconv.Itoa(j.Priority), output.Truncate(configText(j), configWidth),
			deref(j.WorkerID), r.age(&j.QueuedAt))
	}
	return t.Write(w)
}

// waitingText is why a queued job waits: the orchestrator's sentence with
// its reason code, or whichever of the two an orchestrator sends.
func waitingText(j Job) string {
	reason, detail := j.WaitingReason, j.WaitingDetail
	if reason == "" || detail == "" {
		return reason + detail
	}
	return detail + " (" + reason + ")"
}

// dependenciesText lists the jobs j waits or waited for, each with its
// condition and state: "j_a ok: met, j_b any: pending (running)".
func dependenciesText(j Job) string {
	parts := make([]string, 0, len(j.DependsOn))
	for _, d := range j.DependsOn {
		p := d.JobID + " " + d.When + ": " + d.State
		if d.State == "pending" && d.Status != "" {
			p += " (" + d.Status + ")"
		}
		parts = append(parts, p)
	}
	if j.OnUnmet == "hold" && len(parts) > 0 {
		parts = append(parts, "held if one is never met")
	}
	return strings.Join(parts, ", ")
}

func (r renderer) job(w io.Writer, j Job) error {
	var req []string
	if j.MinVRAMGB > 0 {
		req = append(req, fmt.Sprintf("at least %s GB VRAM", trimFloat(j.MinVRAMGB)))
	}
	if len(j.WorkerLabels) > 0 {
		req = append(req, "labels "+labelsText(j.WorkerLabels))
	}
	timeout := ""
	if j.TimeoutSeconds > 0 {
		timeout = (time.Duration(j.TimeoutSeconds) * time.Second).String()
	}
	progress := ""
	if len(j.Progress) > 0 && string(j.Progress) != "null" {
		progress = string(j.Progress)
	}
	kv := [][2]string{
		{"Job", j.JobID},
		{"Status", r.style.State(j.Status)},
		{"Waiting", waitingText(j)},
		{"Depends on", dependenciesText(j)},
		{"Config", configText(j)},
		{"Target", j.Target},
		{"Priority", strconv.Itoa(j.Priority)},
		{"GPUs", j.GPUAllocation},
		{"Requirements", strings.Join(req, ", ")},
		{"Timeout", timeout},
		{"Worker", deref(j.WorkerID)},
		{"Attempt", fmt.Sprintf("%d (retries used %d of %d)", j.Attempt, j.RetriesUsed, j.MaxRetries)},
		{"Submitted by", j.SubmittedBy},
		{"Team", first(j.Team, "default")},
		{"Queued", timeAndAge(r, &j.QueuedAt)},
		{"Started", timeAndAge(r, j.StartedAt)},
		{"Ended", timeAndAge(r, j.CompletedAt)},
		{"Progress", progress},
		{"Checkpoint", checkpointText(r, j)},
		{"Error", deref(j.Error)},
	}
	if err := writeKV(w, kv); err != nil {
		return err
	}
	if len(j.Attempts) == 0 {
		return nil
	}
	fmt.Fprintln(w)
	t := output.NewTable("ATTEMPT", "WORKER", "DISPATCHED", "STARTED", "ENDED", "OUTCOME")
	if r.wide {
		t = output.NewTable("ATTEMPT", "WORKER", "DISPATCHED", "STARTED", "ENDED", "OUTCOME", "CPU", "PEAK MEMORY",
			"GPUS", "GPU TIME", "GPU PEAK MEMORY", "GPU UTIL", "ERROR")
	}
	for _, at := range j.Attempts {
		row := []string{strconv.Itoa(at.Attempt), at.WorkerID, r.age(&at.DispatchedAt), r.age(at.StartedAt), r.age(at.EndedAt), deref(at.Outcome)}
		if r.wide {
			row = append(row, seconds(at.CPUSeconds), bytesText(at.PeakMemoryBytes), indicesText(at.GPUs), seconds(at.GPUSeconds),
				bytesText(at.PeakGPUMemoryBytes), percent(at.GPUUtilizationPct), deref(at.Error))
		}
		t.Row(row...)
	}
	if err := t.Write(w); err != nil {
		return err
	}
	for _, at := range j.Attempts {
		for _, ev := range at.GPUEvents {
			fmt.Fprintf(w, "attempt %d: %s\n", at.Attempt, workerText(ev))
		}
	}
	return nil
}

// tokenMaxPriority is the priority a token was granted: "any" with scope
// "*", "team" where its team's max_priority applies.
func tokenMaxPriority(tk Token) string {
	switch {
	case slices.Contains(tk.Scopes, "*"):
		return "any"
	case tk.MaxPriority == nil:
		return "team"
	}
	return strconv.Itoa(*tk.MaxPriority)
}

func (r renderer) tokens(w io.Writer, ts []Token) error {
	var t *output.Table
	if r.wide {
		t = output.NewTable("ID", "NAME", "TEAM", "SCOPES", "MAX PRIORITY", "CREATED", r.style.Header("STATE"), "REVOKED")
	} else {
		t = output.NewTable("ID", "NAME", "TEAM", "SCOPES", "AGE", r.style.Header("STATE"))
	}
	for _, tk := range ts {
		state := "active"
		if tk.RevokedAt != nil {
			state = "revoked"
		}
		scopes := strings.Join(tk.Scopes, ",")
		if r.wide {
			t.Row(tk.ID, tk.Name, first(tk.Team, "default"), scopes, tokenMaxPriority(tk), tk.CreatedAt, r.style.State(state), deref(tk.RevokedAt))
			continue
		}
		t.Row(tk.ID, output.Truncate(tk.Name, nameWidth), output.Truncate(first(tk.Team, "default"), tokenTeamWidth),
			output.Truncate(scopes, scopesWidth), r.age(&tk.CreatedAt), r.style.State(state))
	}
	return t.Write(w)
}

func (r renderer) artifacts(w io.Writer, as []Artifact) error {
	var t *output.Table
	if r.wide {
		t = output.NewTable("PATH", "BYTES", "MODIFIED", "SHA256")
	} else {
		t = output.NewTable("PATH", "SIZE", "MODIFIED")
	}
	for _, a := range as {
		if r.wide {
			t.Row(a.Path, strconv.FormatInt(a.Size, 10), a.ModifiedAt, a.SHA256)
			continue
		}
		p := a.Path
		if n := len([]rune(p)); n > pathWidth {
			// Keep the end of a long path: the file name tells more than the directories.
			p = "…" + string([]rune(p)[n-pathWidth+1:])
		}
		t.Row(p, humanBytes(a.Size), r.age(&a.ModifiedAt))
	}
	return t.Write(w)
}

func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%dB", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit && exp < 5; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f%ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

// auditColumns are fixed, so that rows printed by --follow line up with the
// first batch.
var (
	auditNarrow = []int{5, 11, 13, 19, 14, 6}
	auditWide   = []int{6, 20, 24, 15, 22, 30, 7}
)

func (r renderer) auditHeader(w io.Writer) {
	if r.wide {
		writeFixed(w, auditWide, "SEQ", "TIME", "ACTOR", "IP", "ACTION", "TARGET", "OUTCOME", "DETAILS")
		return
	}
	writeFixed(w, auditNarrow, "SEQ", "TIME", "ACTOR", "ACTION", "TARGET", "RESULT")
}

func (r renderer) auditRows(w io.Writer, recs []audit.Record) {
	for _, rec := range recs {
		seq := strconv.FormatInt(rec.Seq, 10)
		if r.wide {
			target := rec.TargetType
			if rec.TargetID != "" {
				target += ":" + rec.TargetID
			}
			writeFixed(w, auditWide, seq, rec.Time.UTC().Format(time.RFC3339), rec.Actor, rec.ActorIP, rec.Action, target,
				rec.Outcome, compactJSON(rec.Details))
			continue
		}
		result := "ok"
		if rec.Outcome != audit.Success {
			result = "FAIL"
		}
		writeFixed(w, auditNarrow, seq, rec.Time.UTC().Format("01-02 15:04"), output.Truncate(rec.Actor, 13),
			output.Truncate(rec.Action, 19), output.Truncate(rec.TargetID, 14), result)
	}
}

func compactJSON(raw json.RawMessage) string {
	if len(raw) == 0 || string(raw) == "{}" || string(raw) == "null" {
		return ""
	}
	return string(raw)
}

// writeFixed prints cells padded to widths with two spaces between columns;
// the last cell is not padded.
func writeFixed(w io.Writer, widths []int, cells ...string) {
	var b strings.Builder
	for i, c := range cells {
		if c == "" {
			c = "-"
		}
		if i == len(cells)-1 || i >= len(widths) {
			b.WriteString(c)
			break
		}
		b.WriteString(c)
		if pad := widths[i] - len([]rune(c)); pad > 0 {
			b.WriteString(strings.Repeat(" ", pad))
		}
		b.WriteString("  ")
	}
	fmt.Fprintln(w, output.Sanitize(strings.TrimRight(b.String(), " ")))
}

// statusReport is what `status` gathers; -o json prints it as it is.
type statusReport struct {
	Endpoint string          `json:"endpoint"`
	Health   json.RawMessage `json:"healthz"`
	Ready    json.RawMessage `json:"readyz"`
	ReadyOK  bool            `json:"ready"`
	Stats    json.RawMessage `json:"stats,omitempty"`
	// StatsError is set when the queue summary could not be read (a token
	// without queue.view).
	StatsError string `json:"stats_error,omitempty"`
}

func (r renderer) status(w io.Writer, s statusReport) error {
	var health, ready map[string]any
	_ = json.Unmarshal(s.Health, &health)
	_ = json.Unmarshal(s.Ready, &ready)
	str := func(m map[string]any, keys ...string) string {
		for _, k := range keys {
			if v, ok := m[k].(string); ok && v != "" {
				return v
			}
		}
		return ""
	}
	healthText := r.style.State(first(str(health, "status"), "unreachable"))
	readyText := r.style.State(first(str(ready, "status"), "not ready"))
	if reason := str(ready, "reason"); reason != "" && !s.ReadyOK {
		readyText += " (" + reason + ")"
	}
	notReported := "not reported by this orchestrator"
	kv := [][2]string{
		{"Orchestrator", s.Endpoint},
		{"Health", healthText + ", " + readyText},
		{"Version", first(str(health, "version"), str(ready, "version"), notReported)},
		{"Store", first(str(health, "store", "database"), str(ready, "store", "database"), notReported)},
	}
	if s.StatsError != "" {
		kv = append(kv, [2]string{"Queue", "unavailable: " + s.StatsError})
		return writeKV(w, kv)
	}
	var st api.Stats
	_ = json.Unmarshal(s.Stats, &st)
	wk := st.Workers
	kv = append(kv,
		[2]string{"Workers", workerCounts(wk)},
		[2]string{"Queue", fmt.Sprintf("%d queued, %d running", st.QueueDepth, st.Running)},
		[2]string{"Finished", fmt.Sprintf("%d completed, %d failed, %d cancelled",
			st.ByStatus["completed"], st.ByStatus["failed"], st.ByStatus["cancelled"])},
	)
	// Statuses a newer orchestrator may add still get a line.
	var other []string
	for k, v := range st.ByStatus {
		switch k {
		case "queued", "dispatched", "running", "canceling", "completed", "failed", "cancelled":
		default:
			other = append(other, fmt.Sprintf("%d %s", v, k))
		}
	}
	sort.Strings(other)
	if len(other) > 0 {
		kv = append(kv, [2]string{"Other", strings.Join(other, ", ")})
	}
	return writeKV(w, kv)
}

// workerCounts is "10 (2 idle, 4 busy, 1 draining, 3 offline)": the total,
// then each status that has workers, in the order of a worker's life; "1
// partial" when they all share one.
func workerCounts(wk map[string]int) string {
	var parts []string
	for _, st := range []string{"idle", "partial", "busy", "draining", "offline", "connecting", "disconnected"} {
		if n := wk[st]; n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", n, workerStatusText(st)))
		}
	}
	switch {
	case len(parts) == 0:
		return strconv.Itoa(wk["total"])
	case len(parts) == 1 && strings.HasPrefix(parts[0], strconv.Itoa(wk["total"])+" "):
		return parts[0]
	}
	return fmt.Sprintf("%d (%s)", wk["total"], strings.Join(parts, ", "))
}

// gpusText is a job's GPUs in a table cell: "whole" for the whole worker,
// else the count.
func gpusText(j Job) string {
	if j.WholeWorker || j.GPUCount == nil {
		return "whole"
	}
	return strconv.Itoa(*j.GPUCount)
}

// seconds shows a duration given in seconds; "" when not measured.
func seconds(s *float64) string {
	if s == nil {
		return ""
	}
	return (time.Duration(*s * float64(time.Second))).Round(time.Millisecond).String()
}

// bytesText shows a byte count; "" when not measured or zero.
func bytesText(n *uint64) string {
	if n == nil || *n == 0 {
		return ""
	}
	return humanBytes(int64(*n))
}

func percent(p *float64) string {
	if p == nil {
		return ""
	}
	return strconv.FormatFloat(*p, 'f', 0, 64) + "%"
}

func indicesText(ix []int) string {
	parts := make([]string, len(ix))
	for i, n := range ix {
		parts[i] = strconv.Itoa(n)
	}
	return strings.Join(parts, ",")
}
