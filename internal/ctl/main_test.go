package ctl

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/ctl/client"
)

type runResult struct {
	stdout, stderr string
	code           int
}

// runMain runs simpletunerctl in-process with only the given environment;
// HOME is an empty directory unless env sets it.
func runMain(t *testing.T, env map[string]string, stdin string, args ...string) runResult {
	t.Helper()
	if env == nil {
		env = map[string]string{}
	}
	if _, ok := env["HOME"]; !ok {
		env["HOME"] = t.TempDir()
	}
	var out, errb bytes.Buffer
	code := Main(context.Background(), args, Env{
		Stdin: strings.NewReader(stdin), Stdout: &out, Stderr: &errb,
		Getenv: func(k string) string { return env[k] },
		Now:    func() time.Time { return fixtureNow },
		Socket: filepath.Join(t.TempDir(), "no.sock"),
	})
	return runResult{out.String(), errb.String(), code}
}

func TestUsageErrorsExit2(t *testing.T) {
	for _, args := range [][]string{
		{},
		{"frobnicate"},
		{"jobs", "extra"},
		{"jobs", "--no-such-flag"},
		{"jobs", "--limit", "0"},
		{"jobs", "-o", "yaml"},
		{"jobs", "--status", "bogus"},
		{"workers", "--status", "asleep"},
		{"job"},
		{"submit"},
		{"submit", "name", "--config", "x.json"},
		{"submit", "-", "--config", "x.json"},
		{"submit", "a", "b"},
		{"submit", "a", "--label", "novalue"},
		{"submit", "a", "--label", "=v"},
		{"submit", "a", "--label", "k=1", "--label", "k=2"},
		{"submit", "a", "--priority", "high"},
		{"worker"},
		{"worker", "bogus"},
		{"worker", "create"},
		{"worker", "create", "n", "--persistent", "--ephemeral"},
		{"worker", "labels", "w", "--clear", "a=b"},
		{"tokens"},
		{"tokens", "create", "--scope", "queue.view"},
		{"tokens", "create", "--name", "x"},
		{"audit", "x"},
		{"audit", "--interval", "1ms"},
		{"download", "j_aaaaaaaaaaaa", "dir/"},
		{"logs"},
		{"usage", "--from", "yesterday"},
		{"usage", "--to", "2026-02-30"},
		{"usage", "--from", "2026-03-02", "--to", "2026-03-01"},
		{"usage", "extra"},
	} {
		r := runMain(t, nil, "", args...)
		if r.code != ExitUsage {
			t.Errorf("%q: exit %d, want 2\n%s", args, r.code, r.stderr)
			continue
		}
		if !strings.HasPrefix(r.stderr, "simpletunerctl") || strings.Count(r.stderr, "\n") > 2 {
			t.Errorf("%q: stderr %q is not a prefixed one-line error (plus the help hint)", args, r.stderr)
		}
	}
	if r := runMain(t, nil, "", "--help"); r.code != 0 || !strings.Contains(r.stdout, "Exit status") {
		t.Errorf("--help: %d %q", r.code, r.stdout)
	}
	if r := runMain(t, nil, "", "version"); r.code != 0 || !strings.HasPrefix(r.stdout, "simpletunerctl ") {
		t.Errorf("version: %d %q", r.code, r.stdout)
	}
}

func TestExitCodes(t *testing.T) {
	for _, tc := range []struct {
		err  error
		code int
	}{
		{nil, 0},
		{errors.New("x"), 1},
		{&client.APIError{Status: 404}, 3},
		{&client.APIError{Status: 401}, 4},
		{&client.APIError{Status: 403}, 4},
		{&client.APIError{Status: 409}, 1},
		{&client.APIError{Status: 422}, 1},
		{&client.APIError{Status: 503}, 1},
		{&client.ConnError{Err: errors.New("refused")}, 1},
		{usagef("x"), 2},
		{&ambiguousError{"x"}, 2},
		{notFoundf("x"), 3},
		{&silentError{4}, 4},
	} {
		if got := exitCode(tc.err); got != tc.code {
			t.Errorf("%#v: exit %d, want %d", tc.err, got, tc.code)
		}
	}
}

// tokenServer is a real HTTP server standing in for the orchestrator's token
// list; it records the credential of each request.
type tokenServer struct {
	*httptest.Server
	mu    sync.Mutex
	auths []string
}

func newTokenServer(t *testing.T) *tokenServer {
	ts := &tokenServer{}
	ts.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ts.mu.Lock()
		ts.auths = append(ts.auths, r.Header.Get("Authorization"))
		ts.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"tokens": []}`)
	}))
	t.Cleanup(ts.Close)
	return ts
}

func (ts *tokenServer) last() string {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if len(ts.auths) == 0 {
		return ""
	}
	return ts.auths[len(ts.auths)-1]
}

func writeCtlToml(t *testing.T, home, body string, mode os.FileMode) string {
	t.Helper()
	dir := filepath.Join(home, ".config", "simpletuner")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "ctl.toml")
	if err := os.WriteFile(p, []byte(body), mode); err != nil {
		t.Fatal(err)
	}
	os.Chmod(p, mode)
	return p
}

// TestSettingsPrecedence: flags, then the environment, then ctl.toml.
func TestSettingsPrecedence(t *testing.T) {
	ts := newTokenServer(t)
	home := t.TempDir()
	closed := "http://127.0.0.1:1" // nothing listens on port 1
	writeCtlToml(t, home, "url = \""+ts.URL+"\"\ntoken = \"sta_from_file\"\n", 0o600)
	tokenFile := filepath.Join(t.TempDir(), "tok")
	os.WriteFile(tokenFile, []byte("sta_from_flag\n"), 0o600)

	steps := []struct {
		env  map[string]string
		args []string
		want string
	}{
		{map[string]string{}, nil, "Bearer sta_from_file"},
		{map[string]string{"SIMPLETUNER_ADMIN_TOKEN": "sta_from_env"}, nil, "Bearer sta_from_env"},
		{map[string]string{"SIMPLETUNER_ADMIN_TOKEN": "sta_from_env"}, []string{"--token-file", tokenFile}, "Bearer sta_from_flag"},
		{map[string]string{"SIMPLETUNER_URL": closed}, []string{"--url", ts.URL}, "Bearer sta_from_file"},
	}
	for i, s := range steps {
		s.env["HOME"] = home
		r := runMain(t, s.env, "", append(s.args, "tokens", "list")...)
		if r.code != 0 || ts.last() != s.want {
			t.Errorf("step %d: exit %d, server saw %q, want %q\n%s", i, r.code, ts.last(), s.want, r.stderr)
		}
	}
	// The environment's URL beats the file's.
	r := runMain(t, map[string]string{"HOME": home, "SIMPLETUNER_URL": closed}, "", "tokens", "list")
	if r.code != 1 || !strings.Contains(r.stderr, "cannot reach the orchestrator at "+closed) {
		t.Errorf("SIMPLETUNER_URL ignored: %d %q", r.code, r.stderr)
	}
	// A token file that is empty or holds two lines is refused.
	os.WriteFile(tokenFile, []byte("\n"), 0o600)
	if r := runMain(t, map[string]string{"HOME": home}, "", "--token-file", tokenFile, "tokens", "list"); r.code != 1 || !strings.Contains(r.stderr, "is empty") {
		t.Errorf("empty token file: %d %q", r.code, r.stderr)
	}
}

func TestCtlTomlReadableByOthersIsRefused(t *testing.T) {
	ts := newTokenServer(t)
	home := t.TempDir()
	p := writeCtlToml(t, home, "url = \""+ts.URL+"\"\ntoken = \"sta_secret_in_file\"\n", 0o644)
	r := runMain(t, map[string]string{"HOME": home}, "", "tokens", "list")
	if r.code != 1 || !strings.Contains(r.stderr, p) || !strings.Contains(r.stderr, "chmod 600 "+p) {
		t.Fatalf("exit %d: %q", r.code, r.stderr)
	}
	if strings.Contains(r.stderr+r.stdout, "sta_secret_in_file") {
		t.Fatal("the refusal printed the token")
	}
	if ts.last() != "" {
		t.Fatal("a request was sent with settings from a refused file")
	}
	// Commands that need no connection do not read it.
	if r := runMain(t, map[string]string{"HOME": home}, "", "version"); r.code != 0 {
		t.Fatalf("version with a bad ctl.toml: %d %q", r.code, r.stderr)
	}
}

func TestChooseURL(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "o.sock")
	if got := chooseURL(sock); got != client.DefaultURL {
		t.Errorf("no socket: %q", got)
	}
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	if got := chooseURL(sock); got != "unix://"+sock {
		t.Errorf("usable socket: %q", got)
	}
	if got := chooseURL(sock, "", "https://o:1", "http://file:1"); got != "https://o:1" {
		t.Errorf("configured: %q", got)
	}
	// A socket we may not connect to (mode 0) is not usable... unless we are
	// root, who may connect to anything.
	if os.Geteuid() != 0 {
		os.Chmod(sock, 0)
		if got := chooseURL(sock); got != client.DefaultURL {
			t.Errorf("unusable socket: %q", got)
		}
	}
}

// TestCompletionScripts: the generated bash, zsh and fish scripts parse in
// their shells (each shell that is installed).
func TestCompletionScripts(t *testing.T) {
	for _, sh := range []struct{ name, check string }{{"bash", "bash"}, {"zsh", "zsh"}, {"fish", "fish"}} {
		r := runMain(t, nil, "", "completion", sh.name)
		if r.code != 0 || !strings.Contains(r.stdout, "simpletunerctl") {
			t.Fatalf("completion %s: %d %q", sh.name, r.code, r.stderr)
		}
		path, err := exec.LookPath(sh.check)
		if err != nil {
			t.Logf("%s not installed; only generated", sh.check)
			continue
		}
		f := filepath.Join(t.TempDir(), "completion")
		os.WriteFile(f, []byte(r.stdout), 0o644)
		if out, err := exec.Command(path, "-n", f).CombinedOutput(); err != nil {
			t.Errorf("%s -n on the completion script: %v\n%s", sh.check, err, out)
		}
	}
}

// A misspelled command is refused with the closest commands named, before
// its flags are read: status 2, nothing on stdout, never the help page.
func TestUnknownCommandSuggests(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"token"}, `simpletunerctl: unknown command "token"; did you mean "tokens"?`},
		{[]string{"token", "create", "nlp-ci", "--scopes", "queue.view", "--team", "nlp"}, `simpletunerctl: unknown command "token"; did you mean "tokens"?`},
		{[]string{"-o", "json", "jbos"}, `simpletunerctl: unknown command "jbos"; did you mean "job" or "jobs"?`},
		{[]string{"tokens", "creat", "--name", "x"}, `simpletunerctl tokens: unknown command "creat"; did you mean "create"?`},
		{[]string{"worker", "drian", "w1"}, `simpletunerctl worker: unknown command "drian"; did you mean "drain"?`},
		{[]string{"frobnicate"}, `simpletunerctl: unknown command "frobnicate"; commands: approvals, artifacts, audit,`},
	} {
		r := runMain(t, nil, "", c.args...)
		if r.code != ExitUsage || r.stdout != "" || !strings.HasPrefix(r.stderr, c.want) {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want exit 2 and %q", c.args, r.code, r.stdout, r.stderr, c.want)
		}
	}
	for _, args := range [][]string{{"help", "tokens"}, {"tokens", "--help"}, {"completion", "bash"}, {"__complete", "tok"}} {
		if r := runMain(t, nil, "", args...); r.code != ExitOK {
			t.Errorf("%q: exit %d: %s", args, r.code, r.stderr)
		}
	}
}
