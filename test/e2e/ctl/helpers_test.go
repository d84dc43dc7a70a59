package ctle2e

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/testutil"
	. "github.com/simpletuner/simpletuner-orchestration/test/e2e/e2etest"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden from this run")

// ctl runs the built simpletunerctl with a clean environment: HOME is an
// empty temporary directory (so no ctl.toml of the machine is read), and
// only the variables a test sets reach it.
type ctl struct {
	t   *testing.T
	env map[string]string
	// secrets must never appear in any output but the one-time replies.
	secrets []string
}

type result struct {
	Stdout, Stderr string
	Code           int
}

func (r result) String() string {
	return fmt.Sprintf("exit %d\n--- stdout\n%s--- stderr\n%s", r.Code, r.Stdout, r.Stderr)
}

func newCtl(t *testing.T, env map[string]string) *ctl {
	c := &ctl{t: t, env: map[string]string{"HOME": t.TempDir(), "PATH": os.Getenv("PATH"), "TERM": "dumb"}}
	for k, v := range env {
		c.env[k] = v
	}
	return c
}

// overTCP talks to the orchestrator's TCP listener with its admin token in a file.
func overTCP(t *testing.T, o *Orch) *ctl {
	tokenFile := filepath.Join(t.TempDir(), "admin-token")
	if err := os.WriteFile(tokenFile, []byte(o.Admin+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c := newCtl(t, map[string]string{"SIMPLETUNER_URL": o.URL})
	c.env["CTL_TOKEN_FILE"] = tokenFile
	c.secrets = append(c.secrets, o.Admin)
	return c
}

// overSocket talks to the admin unix socket, where no token is needed (the
// tests run as root).
func overSocket(t *testing.T, o *Orch) *ctl {
	return newCtl(t, map[string]string{"SIMPLETUNER_URL": "unix://" + o.AdminSocket()})
}

func (c *ctl) command(args ...string) *exec.Cmd {
	if tf := c.env["CTL_TOKEN_FILE"]; tf != "" {
		args = append([]string{"--token-file", tf}, args...)
	}
	cmd := exec.Command(filepath.Join(BinDir, "simpletunerctl"), args...)
	for k, v := range c.env {
		if k != "CTL_TOKEN_FILE" {
			cmd.Env = append(cmd.Env, k+"="+v)
		}
	}
	return cmd
}

// run runs simpletunerctl to its end (at most a minute).
func (c *ctl) run(args ...string) result {
	c.t.Helper()
	return c.runStdin("", args...)
}

func (c *ctl) runStdin(stdin string, args ...string) result {
	c.t.Helper()
	cmd := c.command(args...)
	var out, errb bytes.Buffer
	cmd.Stdin, cmd.Stdout, cmd.Stderr = strings.NewReader(stdin), &out, &errb
	if err := cmd.Start(); err != nil {
		c.t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(time.Minute):
		_ = cmd.Process.Kill()
		<-done
		c.t.Fatalf("simpletunerctl %s: still running after a minute\n%s%s", strings.Join(args, " "), out.String(), errb.String())
	}
	r := result{Stdout: out.String(), Stderr: errb.String(), Code: cmd.ProcessState.ExitCode()}
	c.checkNoSecrets(args, r)
	return r
}

// want runs a command and fails the test unless it exits with code.
func (c *ctl) want(code int, args ...string) result {
	c.t.Helper()
	r := c.run(args...)
	if r.Code != code {
		c.t.Fatalf("simpletunerctl %s: want exit %d\n%s", strings.Join(args, " "), code, r)
	}
	return r
}

func (c *ctl) ok(args ...string) result {
	c.t.Helper()
	return c.want(0, args...)
}

// oneTime are the commands whose reply is the one place a new token appears.
func oneTime(args []string) bool {
	s := " " + strings.Join(args, " ") + " "
	return strings.Contains(s, " worker create ") || strings.Contains(s, " worker rotate ") || strings.Contains(s, " tokens create ")
}

func (c *ctl) checkNoSecrets(args []string, r result) {
	c.t.Helper()
	if oneTime(args) {
		return
	}
	for _, s := range c.secrets {
		if s != "" && (strings.Contains(r.Stdout, s) || strings.Contains(r.Stderr, s)) {
			c.t.Errorf("simpletunerctl %s printed a token (%.8s…)", strings.Join(args, " "), s)
		}
	}
}

// background is a simpletunerctl process whose output is read while it runs.
type background struct {
	cmd  *exec.Cmd
	out  testutil.Buffer
	err  testutil.Buffer
	done chan struct{}
}

func (c *ctl) start(args ...string) *background {
	c.t.Helper()
	b := &background{cmd: c.command(args...), done: make(chan struct{})}
	b.cmd.Stdout = &b.out
	b.cmd.Stderr = &b.err
	if err := b.cmd.Start(); err != nil {
		c.t.Fatal(err)
	}
	go func() { _ = b.cmd.Wait(); close(b.done) }()
	c.t.Cleanup(func() {
		_ = b.cmd.Process.Kill()
		<-b.done
	})
	return b
}

func (b *background) output() (string, string) {
	return b.out.String(), b.err.String()
}

// wait waits for the process to end and returns its exit code.
func (b *background) wait(t *testing.T, timeout time.Duration) int {
	t.Helper()
	select {
	case <-b.done:
		return b.cmd.ProcessState.ExitCode()
	case <-time.After(timeout):
		out, errOut := b.output()
		t.Fatalf("simpletunerctl still running after %s\n--- stdout\n%s--- stderr\n%s", timeout, out, errOut)
		return -1
	}
}

// normalizer replaces what differs between runs (ids, tokens, times,
// temporary paths, measured durations) with stable placeholders, numbering
// ids by first appearance so that references between objects still show.
type normalizer struct {
	ids  map[string]string
	next map[string]int
	dirs []string
}

var (
	idRE    = regexp.MustCompile(`\b(w|j|tok)_[a-z2-7]{12}\b`)
	tokenRE = regexp.MustCompile(`\b(sta|wt|stu)_[A-Za-z0-9_-]{40,}`)
	timeRE  = regexp.MustCompile(`"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)"`)
	numRE   = regexp.MustCompile(`"(uptime_seconds|cpu_seconds|peak_memory_bytes|clock_skew_seconds)": [0-9.e+-]+`)
	// Job isolation depends on the machine: cgroups, root.
	isolationRE = regexp.MustCompile(`"isolation": "[^"]*"`)
	hashRE      = regexp.MustCompile(`\b[0-9a-f]{64}\b`)
	portRE      = regexp.MustCompile(`127\.0\.0\.1:\d+`)
	socketRE    = regexp.MustCompile(`unix://\S+?o\.sock`)
)

func newNormalizer(dirs ...string) *normalizer {
	return &normalizer{ids: map[string]string{}, next: map[string]int{}, dirs: dirs}
}

func (n *normalizer) apply(s string) string {
	for _, d := range n.dirs {
		s = strings.ReplaceAll(s, d, "<dir>")
	}
	s = tokenRE.ReplaceAllStringFunc(s, func(m string) string { return "<" + m[:strings.IndexByte(m, '_')] + "-token>" })
	s = idRE.ReplaceAllStringFunc(s, func(m string) string {
		if v, ok := n.ids[m]; ok {
			return v
		}
		kind := m[:strings.IndexByte(m, '_')]
		n.next[kind]++
		v := fmt.Sprintf("%s_<%d>", kind, n.next[kind])
		n.ids[m] = v
		return v
	})
	s = timeRE.ReplaceAllString(s, `"<time>"`)
	s = numRE.ReplaceAllString(s, `"$1": <n>`)
	s = isolationRE.ReplaceAllString(s, `"isolation": "<isolation>"`)
	s = hashRE.ReplaceAllString(s, "<hash>")
	s = socketRE.ReplaceAllString(s, "unix://<socket>")
	s = portRE.ReplaceAllString(s, "127.0.0.1:<port>")
	return s
}

// golden compares got with testdata/name.golden (rewritten with -update).
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run the test with -update to create it)", err)
	}
	if string(want) != got {
		t.Errorf("%s differs from the golden file (run with -update if the change is intended)\n--- want\n%s\n--- got\n%s", path, want, got)
	}
}
