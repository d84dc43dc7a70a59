package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	. "github.com/simpletuner/simpletuner-orchestration/test/e2e/e2etest"
)

// quickStart is the shell of the README's by-hand quick start: every ```sh
// block between the quickstart markers, in order.
func quickStart(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	readme := string(b)
	i, j := strings.Index(readme, "<!-- quickstart:begin -->"), strings.Index(readme, "<!-- quickstart:end -->")
	if i < 0 || j < i {
		t.Fatal("README.md lacks the quickstart markers")
	}
	blocks := regexp.MustCompile("(?s)```sh\n(.*?)```").FindAllStringSubmatch(readme[i:j], -1)
	if len(blocks) < 5 {
		t.Fatalf("found %d shell blocks in the quick start", len(blocks))
	}
	var script strings.Builder
	for _, b := range blocks {
		script.WriteString(b[1])
	}
	return script.String()
}

// The README's quick start works when pasted: its blocks run, in order, in
// bash against the built binaries, with only the state directory, the port
// and the binaries' directory swapped for the test's own.
func TestReadmeQuickStart(t *testing.T) {
	t.Parallel()
	script := quickStart(t)
	dir := t.TempDir()
	OpenToJobs(t, dir) // as /tmp/st-quick would be
	port := FreePort(t)
	for old, repl := range map[string]string{
		"/tmp/st-quick":                dir,
		"127.0.0.1:8001":               fmt.Sprintf("127.0.0.1:%d", port),
		`export PATH="$PWD/bin:$PATH"`: fmt.Sprintf("export PATH=%q:$PATH", BinDir),
	} {
		if !strings.Contains(script, old) {
			t.Fatalf("the quick start no longer contains %q", old)
		}
		script = strings.ReplaceAll(script, old, repl)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-euo", "pipefail", "-c", script)
	cmd.Dir = "../.."
	cmd.Env = append(os.Environ(), "HOME="+dir, "NO_COLOR=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	out, err := cmd.CombinedOutput()
	defer syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // whatever the script left running
	if err != nil {
		logs := ""
		for _, f := range []string{"orchestratord.log", "workerd.log"} {
			b, _ := os.ReadFile(dir + "/" + f)
			logs += "---- " + f + "\n" + string(b)
		}
		t.Fatalf("the quick start failed: %v\n%s\n%s", err, out, logs)
	}
	for _, want := range []string{"step 5/5", "completed", "quick-worker", "event: end"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("the quick start's output lacks %q:\n%s", want, out)
		}
	}
}
