package workerd

import (
	"bytes"
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

// --check-config names every mistake of a file at once, each with its
// file:line: an admin token given as the worker's among them, which used to
// show only once the others were fixed. A file that does not parse says
// only that: what it sets is unknown.
func TestCheckConfigReportsEveryMistake(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	conf := filepath.Join(dir, "w.toml")
	body := "[orchestrator]\nurl = \"http://127.0.0.1:8001\"\ntoken = \"" + auth.NewAdminToken() + "\"\n" +
		"[worker]\nself_fence_after = \"-1s\"\nbogus = 2\n[log]\nlevel = \"loud\"\n"
	if err := os.WriteFile(conf, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	var out, errOut strings.Builder
	code := Main([]string{"--config", conf, "--check-config"}, func(string) string { return "" }, &out, &errOut)
	for _, want := range []string{
		conf + ":3: key orchestrator.token: this is an admin token",
		conf + ":5: key worker.self_fence_after:",
		conf + ":6: key worker.bogus: unknown key",
		conf + ":8: key log.level:",
	} {
		if !strings.Contains(errOut.String(), want) {
			t.Errorf("lacks %q", want)
		}
	}
	if code != ExitConfig || t.Failed() {
		t.Fatalf("exit %d\n%s", code, errOut.String())
	}

	if err := os.WriteFile(conf, []byte("[orchestrator\nurl = 1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	errOut.Reset()
	code = Main([]string{"--config", conf, "--check-config"}, func(string) string { return "" }, &out, &errOut)
	if code != ExitConfig || strings.Contains(errOut.String(), "not set") || !strings.Contains(errOut.String(), conf+":2:") {
		t.Errorf("a file that does not parse: exit %d\n%s", code, errOut.String())
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

func runMain(args ...string) (code int, stdout, stderr string) {
	var out, errb bytes.Buffer
	code = Main(args, func(string) string { return "" }, &out, &errb)
	return code, out.String(), errb.String()
}

// Help goes to stdout with exit 0; a command line workerd cannot use is a
// configuration error (exit 1) naming the flag or argument.
func TestCommandLineUsage(t *testing.T) {
	code, out, _ := runMain("--help")
	if code != ExitOK || !strings.HasPrefix(out, "Usage:") || strings.Contains(out, "help requested") {
		t.Errorf("--help: exit %d:\n%s", code, out)
	}
	for _, want := range []string{"  --config file ", "  --orchestrator-url URL ", "  -v, --verbose ", "simpletuner-workerd(8)"} {
		if !strings.Contains(out, want) {
			t.Errorf("--help lacks %q:\n%s", want, out)
		}
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--bogus"}, "flag provided but not defined: --bogus"},
		{[]string{"--config", "/nonexistent.toml", "run"}, `unexpected argument "run"`},
	} {
		code, out, errOut := runMain(c.args...)
		if code != ExitUsage || out != "" || !strings.HasPrefix(errOut, "simpletuner-workerd: ") || !strings.Contains(errOut, c.want) {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want exit 2 and %q", c.args, code, out, errOut, c.want)
		}
	}
}
