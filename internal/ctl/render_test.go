package ctl

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/simpletuner/simpletuner-orchestration/internal/api"
	"github.com/simpletuner/simpletuner-orchestration/internal/audit"
	"github.com/simpletuner/simpletuner-orchestration/internal/ctl/output"
	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
	"github.com/simpletuner/simpletuner-orchestration/internal/webhook/spec"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden from this run")

// fixtureNow is the clock of every golden table: ages are relative to it.
var fixtureNow = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func readFixture(t *testing.T, name string, v any) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	if v != nil {
		if err := json.Unmarshal(b, v); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	return b
}

func checkGolden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if !bytes.Equal(want, got) {
		t.Errorf("%s differs (run with -update if intended)\n--- want\n%s\n--- got\n%s", path, want, got)
	}
}

// renderCase renders one fixture in one format.
type renderCase struct {
	name   string
	render func(r renderer, w *bytes.Buffer) error
}

func renderCases(t *testing.T) []renderCase {
	var workers struct {
		Workers []Worker `json:"workers"`
	}
	readFixture(t, "workers.json", &workers)
	var jobs struct {
		Entries []Job `json:"entries"`
	}
	readFixture(t, "jobs.json", &jobs)
	var job Job
	readFixture(t, "job.json", &job)
	var tokens struct {
		Tokens []Token `json:"tokens"`
	}
	readFixture(t, "tokens.json", &tokens)
	var recs struct {
		Records []audit.Record `json:"records"`
	}
	readFixture(t, "audit.json", &recs)
	arts, err := decodeArtifacts(readFixture(t, "artifacts.json", nil))
	if err != nil {
		t.Fatal(err)
	}
	var status statusReport
	readFixture(t, "status.json", &status)
	var hooks struct {
		Webhooks []spec.Subscription `json:"webhooks"`
	}
	readFixture(t, "webhooks.json", &hooks)
	var deliveries struct {
		Deliveries []spec.Delivery `json:"deliveries"`
	}
	readFixture(t, "deliveries.json", &deliveries)
	var usage api.Usage
	readFixture(t, "usage.json", &usage)
	var people api.PersonList
	readFixture(t, "people.json", &people)
	me := api.Whoami{Kind: "admin", ID: "tok_bbcdefghijkl", Name: "ci", Scopes: []string{"queue.submit", "queue.view"},
		Actor: "admin:tok_bbcdefghijkl", Team: "nlp", MaxPriority: 10}
	return []renderCase{
		{"workers", func(r renderer, w *bytes.Buffer) error { return r.workers(w, workers.Workers) }},
		{"worker", func(r renderer, w *bytes.Buffer) error { return r.worker(w, workers.Workers[0]) }},
		{"jobs", func(r renderer, w *bytes.Buffer) error { return r.jobs(w, jobs.Entries) }},
		{"job", func(r renderer, w *bytes.Buffer) error { return r.job(w, job) }},
		{"tokens", func(r renderer, w *bytes.Buffer) error { return r.tokens(w, tokens.Tokens) }},
		{"audit", func(r renderer, w *bytes.Buffer) error { r.auditHeader(w); r.auditRows(w, recs.Records); return nil }},
		{"artifacts", func(r renderer, w *bytes.Buffer) error { return r.artifacts(w, arts) }},
		{"status", func(r renderer, w *bytes.Buffer) error { return r.status(w, status) }},
		{"webhooks", func(r renderer, w *bytes.Buffer) error { return r.webhooks(w, hooks.Webhooks) }},
		{"webhook", func(r renderer, w *bytes.Buffer) error { return r.webhook(w, hooks.Webhooks[1], deliveries.Deliveries) }},
		{"deliveries", func(r renderer, w *bytes.Buffer) error { return r.deliveries(w, deliveries.Deliveries) }},
		{"usage", func(r renderer, w *bytes.Buffer) error { return r.usage(w, usage) }},
		{"whoami", func(r renderer, w *bytes.Buffer) error { return r.whoami(w, me, "") }},
		{"people", func(r renderer, w *bytes.Buffer) error { return r.people(w, people.People) }},
	}
}

// TestTablesGolden renders recorded API replies as tables and wide tables
// and compares them with testdata/<name>.<format>.golden.
func TestTablesGolden(t *testing.T) {
	for _, tc := range renderCases(t) {
		for _, wide := range []bool{false, true} {
			name := tc.name + ".table"
			if wide {
				name = tc.name + ".wide"
			}
			t.Run(name, func(t *testing.T) {
				var buf bytes.Buffer
				if err := tc.render(renderer{now: fixtureNow, wide: wide}, &buf); err != nil {
					t.Fatal(err)
				}
				checkGolden(t, name, buf.Bytes())
				if wide {
					return
				}
				for i, line := range strings.Split(strings.TrimRight(buf.String(), "\n"), "\n") {
					if n := utf8.RuneCountInString(line); n > 79 {
						t.Errorf("line %d is %d columns, more than an 80-column terminal holds without wrapping:\n%s", i+1, n, line)
					}
				}
			})
		}
	}
}

var ansi = regexp.MustCompile("\x1b\\[[0-9;]*m")

// TestColourKeepsColumnsAligned: with colour on, removing the escapes gives
// exactly the uncoloured table, so the colour codes never shift a column.
func TestColourKeepsColumnsAligned(t *testing.T) {
	for _, tc := range renderCases(t) {
		for _, wide := range []bool{false, true} {
			var plain, coloured bytes.Buffer
			if err := tc.render(renderer{now: fixtureNow, wide: wide}, &plain); err != nil {
				t.Fatal(err)
			}
			if err := tc.render(renderer{now: fixtureNow, wide: wide, style: output.Styler{On: true}}, &coloured); err != nil {
				t.Fatal(err)
			}
			if tc.name != "audit" && tc.name != "artifacts" && tc.name != "whoami" && !ansi.Match(coloured.Bytes()) {
				t.Errorf("%s: no colour at all", tc.name)
			}
			if got := ansi.ReplaceAllString(coloured.String(), ""); got != plain.String() {
				t.Errorf("%s (wide %v): colour moves the columns\n--- plain\n%s--- coloured, escapes removed\n%s", tc.name, wide, plain.String(), got)
			}
		}
	}
}

// TestJSONOutputIsTheReply: -o json prints the API's reply itself, keys in
// the API's order, indented.
func TestJSONOutputIsTheReply(t *testing.T) {
	for _, name := range []string{"workers.json", "jobs.json", "job.json", "tokens.json", "audit.json", "artifacts.json", "usage.json"} {
		raw := readFixture(t, name, nil)
		var buf bytes.Buffer
		if err := output.WriteJSON(&buf, raw); err != nil {
			t.Fatal(err)
		}
		checkGolden(t, strings.TrimSuffix(name, ".json")+".json", buf.Bytes())
		var a, b any
		if json.Unmarshal(raw, &a) != nil || json.Unmarshal(buf.Bytes(), &b) != nil {
			t.Fatalf("%s: not JSON", name)
		}
		if ja, jb := mustMarshal(a), mustMarshal(b); ja != jb {
			t.Errorf("%s: -o json changed the content", name)
		}
	}
}

func mustMarshal(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}

func TestWorkerJobsAndGPUs(t *testing.T) {
	str := func(s string) *string { return &s }
	wk := func(w api.Worker) Worker { return Worker{w} }
	for _, tc := range []struct {
		w     Worker
		jobs  []string
		extra int
		gpus  string
	}{
		{wk(api.Worker{Status: "idle", Connected: true, GPUCount: 4, GPUsFree: 4}), nil, 0, "4/4"},
		{wk(api.Worker{Status: "busy", Connected: true, GPUCount: 4, CurrentJobID: str("j_1"), RunningJobs: 1}), []string{"j_1"}, 0, "0/4"},
		{wk(api.Worker{Status: "offline", GPUCount: 2}), nil, 0, "-/2"},
		{wk(api.Worker{Status: "connecting", GPUCount: 2}), nil, 0, "-/2"},
		{wk(api.Worker{Status: "partial", GPUCount: 8, GPUsFree: 3, RunningJobs: 3, CurrentJobID: str("j_9")}), []string{"j_9"}, 2, "3/8"},
		{wk(api.Worker{Status: "busy", RunningJobs: 2}), nil, 2, "0/0"},
		{wk(api.Worker{Status: "partial", GPUCount: 8, GPUsFree: 6, GPUConditions: []api.GPUCondition{
			{GPUCondition: protocol.GPUCondition{Index: 1, State: "held"}},
			{GPUCondition: protocol.GPUCondition{Index: 2, State: "unhealthy"}},
		}}), nil, 0, "6/8 (1 unhealthy, 1 held)"},
	} {
		jobs, extra := tc.w.Jobs()
		if strings.Join(jobs, ",") != strings.Join(tc.jobs, ",") || extra != tc.extra {
			t.Errorf("%+v: jobs %v +%d, want %v +%d", tc.w, jobs, extra, tc.jobs, tc.extra)
		}
		if got := tc.w.GPUsFreeText(); got != tc.gpus {
			t.Errorf("%+v: gpus %q, want %q", tc.w, got, tc.gpus)
		}
	}
}

// What workers report reaches the tables with its control characters shown
// escaped: a name or label holding terminal escapes (clear the screen, set
// the title, write the clipboard) or a direction override cannot act on the
// admin's terminal, in the table, the wide table or the one-worker view;
// the colours simpletunerctl adds still work.
func TestHostileWorkerTextIsEscaped(t *testing.T) {
	evil := "gpu\x1b[2J\x1b]0;owned\x07\x1b]52;c;cm0gLXJm\x07\u202eevil\x9b"
	w := Worker{api.Worker{WorkerID: "w_x", Name: evil, Status: "idle", Connected: true, GPUName: evil,
		Labels: map[string]string{"rack": evil}}}
	for _, wide := range []bool{false, true} {
		var buf bytes.Buffer
		r := renderer{now: fixtureNow, wide: wide, style: output.Styler{On: true}}
		if err := r.workers(&buf, []Worker{w}); err != nil {
			t.Fatal(err)
		}
		if err := r.worker(&buf, w); err != nil {
			t.Fatal(err)
		}
		out := ansi.ReplaceAllString(buf.String(), "")
		if strings.ContainsAny(out, "\x1b\x07\u202e") || strings.Contains(out, "\x9b") {
			t.Errorf("wide=%v: raw control characters reach the terminal:\n%q", wide, out)
		}
		if !strings.Contains(out, `gpu\x1b[2J\x1b]0;owned\x07`) {
			t.Errorf("wide=%v: the name is not shown escaped:\n%s", wide, out)
		}
		if !strings.Contains(buf.String(), "\x1b[32midle") {
			t.Errorf("wide=%v: the status lost its colour:\n%q", wide, buf.String())
		}
	}
}

// A GPU's condition reason, its health and a job's GPU events come from
// the worker too: shown escaped, each on its own line.
func TestHostileGPUTextIsEscaped(t *testing.T) {
	evil := "XID 79\x1b[2J\x1b]0;owned\x07\u202e\nfake line\x9b"
	w := Worker{api.Worker{WorkerID: "w_x", Name: "box", Status: "partial", Connected: true, GPUCount: 2,
		GPUConditions: []api.GPUCondition{{GPUCondition: protocol.GPUCondition{Index: 0, UUID: "GPU-0", State: "unhealthy", Reason: evil}}},
		GPUTelemetry:  &api.GPUTelemetry{GPUs: []protocol.GPUTelemetry{{Index: 1, UUID: "GPU-1", Health: "slowdown: " + evil}}}}}
	j := Job{ID: "j_x", Status: "failed", Attempts: []api.Attempt{{Attempt: 1, WorkerID: "w_x", GPUEvents: []string{evil}}}}
	var buf bytes.Buffer
	r := renderer{now: fixtureNow, style: output.Styler{On: true}}
	if err := r.worker(&buf, w); err != nil {
		t.Fatal(err)
	}
	if err := r.job(&buf, j); err != nil {
		t.Fatal(err)
	}
	out := ansi.ReplaceAllString(buf.String(), "")
	if strings.ContainsAny(out, "\x1b\x07\u202e") || strings.Contains(out, "\x9b") || strings.Contains(out, "\nfake line") {
		t.Errorf("raw control characters reach the terminal:\n%q", out)
	}
	esc := `XID 79\x1b[2J\x1b]0;owned\x07\u202e fake line\x9b`
	for _, want := range []string{"GPU 0 unhealthy since -: " + esc, "GPU 1: slowdown: " + esc, "attempt 1: " + esc} {
		if !strings.Contains(out, want+"\n") {
			t.Errorf("%q is not shown escaped on one line:\n%s", want, out)
		}
	}
}

// The status line's worker count: the total, then the statuses that have
// workers, worded as the worker list words them.
func TestWorkerCounts(t *testing.T) {
	for _, c := range []struct {
		counts map[string]int
		want   string
	}{
		{map[string]int{"total": 0}, "0"},
		{map[string]int{"total": 1, "partial": 1}, "1 partial"},
		{map[string]int{"total": 2, "connecting": 2}, "2 never connected"},
		{map[string]int{"total": 3, "idle": 1, "connecting": 1, "disconnected": 1}, "3 (1 idle, 1 never connected, 1 disconnected)"},
	} {
		if got := workerCounts(c.counts); got != c.want {
			t.Errorf("workerCounts(%v) = %q, want %q", c.counts, got, c.want)
		}
	}
}

// A queued job's wait is told in the orchestrator's sentence, with its code.
func TestWaitingText(t *testing.T) {
	reason, detail := "gpus_busy", "1 matching worker(s) have room for a job, none has 2 free GPU(s)"
	for _, c := range []struct {
		reason, detail string
		want           string
	}{
		{reason, detail, detail + " (gpus_busy)"},
		{reason, "", "gpus_busy"},
		{"", detail, detail},
		{"", "", ""},
	} {
		if got := waitingText(Job{WaitingReason: c.reason, WaitingDetail: c.detail}); got != c.want {
			t.Errorf("waitingText(%q, %q) = %q, want %q", c.reason, c.detail, got, c.want)
		}
	}
}

// A day that is not YYYY-MM-DD, or a period that ends before it starts, is
// refused before any request, naming the flag.
func TestUsageDays(t *testing.T) {
	for _, c := range []struct {
		from, to, want string
	}{
		{"", "", ""},
		{"2026-02-01", "", "from=2026-02-01"},
		{"2026-02-01", "2026-02-01", "from=2026-02-01&to=2026-02-01"},
		{"1 Feb", "", `--from "1 Feb": want a day as YYYY-MM-DD`},
		{"", "2026-13-01", `--to "2026-13-01": want a day as YYYY-MM-DD`},
		{"2026-02-02", "2026-02-01", "--from 2026-02-02 is after --to 2026-02-01"},
	} {
		q, err := usageQuery(c.from, c.to)
		got := ""
		if err != nil {
			got = err.Error()
			if exitCode(err) != ExitUsage {
				t.Errorf("%q..%q: exit %d, want 2", c.from, c.to, exitCode(err))
			}
		} else {
			got = q.Encode()
		}
		if got != c.want {
			t.Errorf("usageQuery(%q, %q) = %q, want %q", c.from, c.to, got, c.want)
		}
	}
}
