package faults

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	. "github.com/simpletuner/simpletuner-orchestration/test/e2e/e2etest"
)

// Reload under load: while jobs run, SIGHUP with changed timers and log
// level (applied, each change logged with where it was set), then SIGHUP
// with one invalid value (the whole file refused with file:line, the running
// configuration kept). No job is affected: nothing requeued, no worker offline.
func TestReloadUnderLoad(t *testing.T) {
	fullOnly(t)
	o := StartOrchestratorWith(t, OrchOptions{Metrics: true, LogLevel: "info"})
	h := NewHistory(t, o)
	// The jobs go to the pool; the probes below (registered, never running
	// anything) are outside it.
	pool := map[string]string{"pool": "main"}
	real := map[string]bool{}
	for _, name := range []string{"a", "b", "c"} {
		real[o.StartWorker(WorkerSpec{Name: name, Persistent: true, Labels: pool, Command: h.WrapperCommand()}).ID] = true
	}
	for range 9 {
		h.Submit(trainFor(1.5), map[string]any{"worker_labels": pool})
	}
	Eventually(t, 20*time.Second, "jobs training", func() bool { return len(AllJobProcs()) >= 3 })

	// The timers a new registration is told, and whether debug lines appear.
	announced := func() (hbTimeout, ping float64) {
		t.Helper()
		_, token := o.CreateWorker(fmt.Sprintf("probe-%d", time.Now().UnixNano()), false, nil)
		body, _ := json.Marshal(map[string]any{"name": "probe", "protocol": 2})
		req, _ := http.NewRequest("POST", o.URL+"/api/workers/register", bytes.NewReader(body))
		req.Header.Set("X-Worker-Token", token)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		var r struct {
			HB   float64 `json:"heartbeat_timeout_seconds"`
			Ping float64 `json:"ping_interval_seconds"`
		}
		if err := json.NewDecoder(res.Body).Decode(&r); err != nil || res.StatusCode != 200 {
			t.Fatalf("probe registration: %d %v", res.StatusCode, err)
		}
		return r.HB, r.Ping
	}
	// A stream that opens and closes logs a debug line ("worker stream closed").
	debugLines := func() int {
		id, token := o.CreateWorker(fmt.Sprintf("blip-%d", time.Now().UnixNano()), false, nil)
		sim := &SimWorker{ID: id, Token: token, Name: "blip", BaseURL: o.URL, Client: SimClient()}
		if err := sim.Connect(context.Background()); err != nil {
			t.Fatal(err)
		}
		sim.Close()
		return strings.Count(o.P.Output(), `"level":"DEBUG"`)
	}
	if hb, ping := announced(); hb != 1.5 || ping != 0.5 {
		t.Fatalf("before the reload: heartbeat_timeout %v, ping %v", hb, ping)
	}
	orig, err := os.ReadFile(o.Conf)
	if err != nil {
		t.Fatal(err)
	}
	rewrite := func(pairs ...string) string {
		out := string(orig)
		for i := 0; i < len(pairs); i += 2 {
			if !strings.Contains(out, pairs[i]) {
				t.Fatalf("%q not in %s", pairs[i], o.Conf)
			}
			out = strings.Replace(out, pairs[i], pairs[i+1], 1)
		}
		if err := os.WriteFile(o.Conf, []byte(out), 0o600); err != nil {
			t.Fatal(err)
		}
		return out
	}
	lineOf := func(text, prefix string) int {
		for i, l := range strings.Split(text, "\n") {
			if strings.HasPrefix(l, prefix) {
				return i + 1
			}
		}
		t.Fatalf("no line %q", prefix)
		return 0
	}

	h.Fault("SIGHUP: heartbeat_timeout 1.5s→3s, health_check_interval 200ms→300ms, ping_interval 500ms→700ms, log level info→debug")
	valid := rewrite(`heartbeat_timeout = "1.5s"`, `heartbeat_timeout = "3s"`, `health_check_interval = "200ms"`, `health_check_interval = "300ms"`,
		`ping_interval = "500ms"`, `ping_interval = "700ms"`, `level = "info"`, `level = "debug"`)
	o.P.Signal(syscall.SIGHUP)
	hbLine := lineOf(valid, "heartbeat_timeout =")
	Eventually(t, 10*time.Second, "the reload logged", func() bool { return strings.Contains(o.P.Output(), "configuration reloaded") })
	out := o.P.Output()
	for _, want := range []string{
		fmt.Sprintf(`"key":"workers.heartbeat_timeout","old":"1.5s","new":"3s","set_at":"%s:%d"`, o.Conf, hbLine),
		`"key":"workers.health_check_interval","old":"200ms","new":"300ms"`,
		`"key":"workers.ping_interval","old":"500ms","new":"700ms"`,
		`"key":"log.level","old":"info","new":"debug"`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the reload did not log %s", want)
		}
	}
	if hb, ping := announced(); hb != 3 || ping != 0.7 {
		t.Errorf("after the reload new registrations are told heartbeat_timeout %v, ping %v; want 3, 0.7", hb, ping)
	}
	Eventually(t, 5*time.Second, "debug lines after the reload", func() bool { return debugLines() > 0 })

	h.Fault("SIGHUP: heartbeat_timeout = \"soon\" (invalid), everything else as before")
	orig = []byte(valid)
	bad := rewrite(`heartbeat_timeout = "3s"`, `heartbeat_timeout = "soon"`)
	before := strings.Count(o.P.Output(), "reload failed")
	o.P.Signal(syscall.SIGHUP)
	Eventually(t, 10*time.Second, "the invalid file refused", func() bool {
		return strings.Count(o.P.Output(), "reload failed") > before
	})
	refusal := regexp.MustCompile(`"msg":"reload failed; keeping the previous configuration","err":"[^"]*` +
		regexp.QuoteMeta(fmt.Sprintf("%s:%d", o.Conf, lineOf(bad, "heartbeat_timeout ="))) + `[^"]*workers.heartbeat_timeout`)
	if !refusal.MatchString(o.P.Output()) {
		t.Errorf("the refusal does not name the file:line and key")
	}
	debugBefore := debugLines()
	if hb, ping := announced(); hb != 3 || ping != 0.7 {
		t.Errorf("after the refused reload new registrations are told heartbeat_timeout %v, ping %v; want the running 3, 0.7", hb, ping)
	}
	Eventually(t, 5*time.Second, "debug lines still logged", func() bool { return debugLines() > debugBefore })

	h.WaitAllTerminal(60 * time.Second)
	h.Finish()
	sum := h.Check(Expect{MaxRequeues: 0, Statuses: []string{"completed"}})
	for _, r := range h.Audit {
		if r.Action == "worker.offline" && real[r.TargetID] {
			t.Errorf("a worker went offline during the reloads: %s", r.Details)
		}
	}
	t.Logf("RESULT %s: valid reload: 4 changes logged with file:line and applied (new registrations told 3 s / 0.7 s, debug on); invalid reload refused at %s:%d, previous configuration kept; %s",
		t.Name(), "o.toml", lineOf(bad, "heartbeat_timeout ="), sum)
}
