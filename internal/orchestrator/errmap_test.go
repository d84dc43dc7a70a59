package orchestrator_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/simpletuner/simpletuner-orchestration/internal/pgtest"
	"github.com/simpletuner/simpletuner-orchestration/internal/store/postgres"
	"github.com/simpletuner/simpletuner-orchestration/internal/testutil"
)

// Errors that are not the database's are never answered 503: a config name
// too long for the file system, or one naming a plain file, is the client's
// mistake (422 or 404); a fault on the orchestrator's disk is a 500 with a
// request id that leads to the log. No answer shows the configs directory.
func TestErrorsAreMappedPrecisely(t *testing.T) {
	t.Parallel()
	e := setup(t, backends["sqlite"](t))
	dir := e.srv.Options().ConfigsDir
	if err := os.WriteFile(filepath.Join(dir, "plainfile"), []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "adir.json"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name   string
		status int
		want   string
	}{
		{strings.Repeat("x", 300), 422, "config_name"}, // ENAMETOOLONG before the length check
		{strings.Repeat("y", 250) + ".json", 422, "config_name"},
		{"plainfile", 404, "plainfile"}, // plainfile/config.json: ENOTDIR
		{"missing", 404, "missing"},
	} {
		r := e.AdminDo("POST", "/api/queue/submit", map[string]any{"config_name": c.name})
		detail, _ := r.JSON["detail"].(string)
		if r.Status != c.status || !strings.Contains(detail, c.want) {
			t.Errorf("config_name %.20q…: got %d %s; want %d naming %q", c.name, r.Status, r.Body, c.status, c.want)
		}
		if strings.Contains(string(r.Body), dir) {
			t.Errorf("config_name %.20q…: the answer shows the configs directory: %s", c.name, r.Body)
		}
	}

	// adir.json is a directory: reading it fails on our side.
	r := e.AdminDo("POST", "/api/queue/submit", map[string]any{"config_name": "adir"})
	id, _ := r.JSON["request_id"].(string)
	if r.Status != 500 || r.JSON["error"] != "internal" || !strings.HasPrefix(id, "req_") || r.Header.Get("X-Request-ID") != id {
		t.Fatalf("unreadable config: got %d %s; want 500 with a request id", r.Status, r.Body)
	}
	if strings.Contains(string(r.Body), dir) || !strings.Contains(r.JSON["detail"].(string), id) {
		t.Fatalf("500 answer: %s", r.Body)
	}
	logged := false
	for _, line := range strings.Split(e.logs.String(), "\n") {
		logged = logged || (strings.Contains(line, id) && strings.Contains(line, "adir.json"))
	}
	if !logged {
		t.Fatalf("the log has no line with request id %s and the failing path:\n%s", id, e.logs.String())
	}

	// 503 stays for the database.
	if err := e.st.Close(); err != nil {
		t.Fatal(err)
	}
	r = e.Queue("")
	if r.Status != 503 || r.JSON["error"] != "unavailable" || r.Header.Get("Retry-After") == "" {
		t.Fatalf("closed database: got %d %s; want 503", r.Status, r.Body)
	}
}

// /readyz needs no credential, so it must not tell a stranger where the
// database lives or what its driver said; the log keeps the details.
func TestReadyzDoesNotLeakTheDatabaseError(t *testing.T) {
	t.Parallel()
	c, err := pgtest.NewCluster()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Remove)
	st, err := postgres.Open(context.Background(), c.URL, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	// Have the store's notification listener connected before the server
	// stops: connecting it blocks until the server answers.
	if _, err := st.Subscribe(t.Context()); err != nil {
		t.Fatal(err)
	}
	e := setup(t, st)
	e.Must(e.Do("GET", "/readyz", nil, nil), 200)
	c.Stop()
	u, _ := url.Parse(c.URL)
	port := u.Port()
	r := e.Must(e.Do("GET", "/readyz", nil, nil), 503)
	if r.JSON["reason"] != "database unreachable" {
		t.Fatalf("/readyz reason %q; want just \"database unreachable\"", r.JSON["reason"])
	}
	for _, leak := range []string{port, "127.0.0.1", "dial", "refused", "pq:"} {
		if strings.Contains(string(r.Body), leak) {
			t.Fatalf("/readyz shows %q: %s", leak, r.Body)
		}
	}
	testutil.Eventually(t, eventWait, "the log to hold the database error", func() bool {
		return strings.Contains(e.logs.String(), port)
	})
	e.Do("GET", "/readyz", nil, nil)
	if n := strings.Count(e.logs.String(), "not ready: the database does not answer"); n != 1 {
		t.Fatalf("logged the lost readiness %d times; want once", n)
	}
}

// The connection command is pasted into a shell: it holds no token (it asks
// for one, without echo, so the token is in no history or log), a Host
// header cannot smuggle a command into it, and the agent gets the token in
// its environment, never in argv. Checked by running it with a stand-in
// agent and the token on standard input.
func TestConnectionCommandIsSafe(t *testing.T) {
	t.Parallel()
	e := setup(t, backends["sqlite"](t))
	bin := t.TempDir()
	seen := filepath.Join(bin, "seen")
	agent := "#!/bin/sh\n{ printf 'token=%s\\n' \"$SIMPLETUNER_WORKER_TOKEN\"; printf 'arg=%s\\n' \"$@\"; } > " + seen + "\n"
	if err := os.WriteFile(filepath.Join(bin, "simpletuner"), []byte(agent), 0o755); err != nil {
		t.Fatal(err)
	}
	created := 0
	create := func(host string) (string, string) {
		t.Helper()
		created++ // worker names are unique
		req, _ := http.NewRequest("POST", e.URL+"/api/admin/workers", strings.NewReader(fmt.Sprintf(`{"name": "w%d"}`, created)))
		req.Host = host
		req.Header.Set("Authorization", "Bearer "+e.Admin)
		res, err := testutil.Client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		var body map[string]any
		if err := json.NewDecoder(res.Body).Decode(&body); err != nil || res.StatusCode != 201 {
			t.Fatalf("create with Host %q: %d %v %v", host, res.StatusCode, body, err)
		}
		return body["connection_command"].(string), body["token"].(string)
	}
	run := func(cmd, token string) []string {
		t.Helper()
		os.Remove(seen)
		sh := exec.Command("/bin/sh", "-c", cmd)
		sh.Env = []string{"PATH=" + bin + ":/usr/bin:/bin"}
		sh.Stdin = strings.NewReader(token + "\n")
		sh.Dir = t.TempDir()
		if out, err := sh.CombinedOutput(); err != nil {
			t.Fatalf("running %s: %v\n%s", cmd, err, out)
		}
		b, err := os.ReadFile(seen)
		if err != nil {
			t.Fatalf("the agent did not run: %v", err)
		}
		return strings.Split(strings.TrimSpace(string(b)), "\n")
	}
	for _, host := range []string{"$(touch pwned):8001", "a;b", "`id`", "x'y", "[::1]:80:1", "h:0", "bad host"} {
		cmd, token := create(host)
		if strings.Contains(cmd, token) {
			t.Fatalf("the command holds the token: %s", cmd)
		}
		want := []string{"token=" + token, "arg=worker", "arg=--orchestrator-url", "arg=" + e.URL}
		if got := run(cmd, token); strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Errorf("Host %q: the agent got %q; want %q (the address the request came in on)", host, got, want)
		}
	}
	for _, host := range []string{"orchestrator.example:8001", "10.0.0.5:8001", "[fd00::5]:8001", "gpu-head"} {
		cmd, token := create(host)
		if got := run(cmd, token); got[len(got)-1] != "arg=http://"+host {
			t.Errorf("Host %q: the agent got %q", host, got)
		}
	}
}
