package workerd

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/simpletuner/simpletuner-orchestration/internal/auth"
)

// --check-config fails (status 1) when the worker could not run: no
// orchestrator URL, no token. The packaged file is such a template.
func TestCheckConfigNeedsURLAndToken(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	noenv := func(string) string { return "" }
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	tokenFile := write("token", auth.NewWorkerToken()+"\n")
	check := func(conf string) (int, string, string) {
		var out, errOut strings.Builder
		code := Main([]string{"--config", conf, "--check-config"}, noenv, &out, &errOut)
		return code, out.String(), errOut.String()
	}

	code, out, errOut := check(write("empty.toml", "[orchestrator]\ntoken_file = \"\"\n[gpu]\nbackend = \"none\"\n"))
	if code != ExitConfig || !strings.Contains(errOut, "key orchestrator.url: not set") || !strings.Contains(errOut, "key orchestrator.token: not set") {
		t.Errorf("no URL, no token: exit %d\n%s", code, errOut)
	}
	if !strings.Contains(out, "[orchestrator]") {
		t.Errorf("the configuration is not printed:\n%s", out)
	}

	code, _, errOut = check("../../../etc/workerd.toml")
	if code != ExitConfig || !strings.Contains(errOut, "key orchestrator.url: not set") {
		t.Errorf("the packaged template: exit %d\n%s", code, errOut)
	}

	good := write("good.toml", "[orchestrator]\nurl = \"http://127.0.0.1:8001\"\ntoken_file = \""+tokenFile+"\"\n[gpu]\nbackend = \"none\"\n")
	if code, _, errOut := check(good); code != ExitOK {
		t.Errorf("a complete file: exit %d\n%s", code, errOut)
	}
}

// --worker-token works, and says each time why it should not be used.
func TestWorkerTokenFlagWarns(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	conf := filepath.Join(dir, "w.toml")
	if err := os.WriteFile(conf, []byte("[orchestrator]\nurl = \"http://127.0.0.1:8001\"\ntoken_file = \"\"\n[gpu]\nbackend = \"none\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var out, errOut strings.Builder
	code := Main([]string{"--config", conf, "--worker-token", auth.NewWorkerToken(), "--check-config"}, func(string) string { return "" }, &out, &errOut)
	if code != ExitOK || !strings.Contains(errOut.String(), "warning: a token given as --worker-token can be read by every user") ||
		!strings.Contains(errOut.String(), "/etc/simpletuner/worker-token") {
		t.Fatalf("exit %d\n%s", code, errOut.String())
	}
	errOut.Reset()
	Main([]string{"--config", conf, "--check-config"}, func(k string) string {
		return map[string]string{"SIMPLETUNER_WORKER_TOKEN": auth.NewWorkerToken()}[k]
	}, &out, &errOut)
	if strings.Contains(errOut.String(), "warning") {
		t.Errorf("a warning without the flag: %s", errOut.String())
	}
}
