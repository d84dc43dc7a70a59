package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/simpletuner/simpletuner-orchestration/internal/config"
	"github.com/simpletuner/simpletuner-orchestration/internal/ctl"
	. "github.com/simpletuner/simpletuner-orchestration/test/e2e/e2etest"
)

// docCommand is one command line shown in an example of the documentation.
type docCommand struct {
	where string   // file:line
	argv  []string // the program and its arguments, quotes removed, variables as written
}

func (c docCommand) String() string { return c.where + ": " + strings.Join(c.argv, " ") }

// The programs whose command lines the documentation shows.
var docPrograms = []string{"simpletunerctl", "simpletuner-orchestratord", "simpletuner-workerd", "curl"}

// simpletunerctl commands checked against the command tree only, and why.
// Every other simpletunerctl line runs against the test's orchestrator and
// must exit 0; those that change something find the objects they name
// prepared first (see prepare).
var parseOnlyCommands = map[string]string{
	"download": "needs an artifact a training run uploaded",
	"login":    "needs an identity provider and a person confirming the sign-in (test/e2e/ctl/login_test.go runs it)",
}

// Flags that make a command run until interrupted or until a job that no
// worker here runs ends; lines with them are checked, not run.
var foreverFlags = []string{"-w", "--watch", "--follow", "--wait"}

// The objects the examples name: workers, a webhook subscription, named
// training configurations.
var (
	exampleWorkers  = []string{"gpu-worker-1", "gpu-1", "quick-worker"}
	exampleWebhook  = "ops"
	exampleConfigs  = []string{"my-training-config", "my-lora"}
	exampleJSONConf = `{"model_type": "lora", "learning_rate": 0.0001}`
)

// GET requests not sent, and why.
var parseOnlyRequests = map[string]*regexp.Regexp{
	"downloads an artifact a training run uploaded": regexp.MustCompile(`/api/queue/[^/]+/artifacts/.`),
}

// Every command line shown in README.md, docs/*.md and the man pages'
// examples is one the real programs accept: simpletunerctl lines parse
// against its command tree (command, flags, argument count) and run against
// a real orchestrator and exit 0 (but those parseOnlyCommands names); the
// orchestrator's lines pass its own command-line check (--check-config),
// and its token commands run; workerd's flags parse; curl requests to the
// API are sent (see curl). The examples' names (j_abc123, gpu-worker-1,
// ops…) are objects the test creates, and the files they read are there.
func TestDocumentedCommandsRun(t *testing.T) {
	t.Parallel()
	cmds := documentedCommands(t)
	ran := 0
	if len(cmds) < 60 {
		t.Fatalf("found only %d documented command lines; is the extraction broken?", len(cmds))
	}
	d := newDocsFixture(t)
	for _, c := range cmds {
		d.parsedOnly = true // until a check runs it
		var err error
		switch c.argv[0] {
		case "simpletunerctl":
			err = d.ctl(c.argv[1:])
		case "simpletuner-orchestratord":
			err = d.orchestratord(c.argv[1:])
		case "simpletuner-workerd":
			err = workerdParses(c.argv[1:])
		case "curl":
			err = d.curl(c.argv[1:])
		}
		if err != nil {
			t.Errorf("%s\n\t%v", c, err)
		}
		if d.parsedOnly {
			t.Logf("checked, not run: %s", c)
		} else {
			ran++
		}
	}
	t.Logf("%d documented command lines, %d of them run", len(cmds), ran)
	if ran < len(cmds)/2 {
		t.Errorf("only %d of %d documented command lines ran", ran, len(cmds))
	}
}

// The extraction finds the command lines of every kind of example, and the
// commands that used to be wrong are refused by the check.
func TestDocumentedCommandsCheckCatchesMistakes(t *testing.T) {
	t.Parallel()
	cmds := documentedCommands(t)
	seen := map[string]bool{}
	for _, c := range cmds {
		seen[strings.SplitN(c.where, ":", 2)[0]+" "+c.argv[0]] = true
	}
	for _, want := range []string{"README.md simpletunerctl", "README.md curl", "docs/teams.md simpletunerctl",
		"man/simpletunerctl.1 simpletunerctl", "man/simpletuner-orchestratord.8 simpletuner-orchestratord",
		"man/simpletuner-workerd.8 simpletuner-workerd", "docs/history.md simpletuner-orchestratord"} {
		if !seen[want] {
			t.Errorf("no %s command found in the examples of %s", strings.Fields(want)[1], strings.Fields(want)[0])
		}
	}
	for _, bad := range [][]string{
		{"token", "create", "nlp-ci", "--scopes", "queue.submit", "--team", "nlp"},
		{"tokens", "create", "nlp-ci", "--name", "x", "--scope", "*"},
		{"job", "show", "j_abc123"},
		{"workers", "--stauts", "idle"},
	} {
		if _, err := ctlParses(bad); err == nil {
			t.Errorf("simpletunerctl %q passed the check", bad)
		}
		if (bad[0] == "token" || bad[0] == "workers") && ctlNamesCommand(bad) == nil {
			t.Errorf("simpletunerctl %q passed the check of quoted commands", bad)
		}
	}
	if err := workerdParses([]string{"--config", "w.toml", "--bogus"}); err == nil {
		t.Error("simpletuner-workerd --bogus passed the check")
	}
	got := splitShell(`job=$(echo '{"a": 1}' | simpletunerctl submit - -q) && simpletunerctl logs -f "$job" > out.log 2>&1 # done`)
	want := [][]string{{"echo", `{"a": 1}`}, {"simpletunerctl", "submit", "-", "-q"}, {"job=$(…)"}, {"simpletunerctl", "logs", "-f", "$job"}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("splitShell:\n got %q\nwant %q", got, want)
	}
}

// Commands quoted in running text (`simpletunerctl job ID`) name commands
// and flags that exist; their arguments are often left out, so their number
// is not checked.
func TestDocumentedInlineCommandsExist(t *testing.T) {
	t.Parallel()
	files, _ := filepath.Glob("../../docs/*.md")
	span := regexp.MustCompile("`(simpletunerctl|simpletuner-orchestratord|simpletuner-workerd) ([^`]*)`")
	n := 0
	for _, f := range append(files, "../../README.md") {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range span.FindAllStringSubmatch(string(b), -1) {
			n++
			words := splitShell(m[2])
			if len(words) == 0 {
				continue
			}
			var err error
			switch m[1] {
			case "simpletunerctl":
				err = ctlNamesCommand(words[0])
			case "simpletuner-workerd":
				err = workerdParses(words[0])
			}
			if err != nil {
				t.Errorf("%s: %s: %v", strings.TrimPrefix(f, "../../"), m[0], err)
			}
		}
	}
	if n < 20 {
		t.Fatalf("found only %d quoted commands", n)
	}
}

// ctlNamesCommand checks a command's path and flags, not its arguments.
func ctlNamesCommand(args []string) error {
	cmd, rest, err := ctl.Command().Find(args)
	if err != nil {
		return err
	}
	if err := cmd.ParseFlags(rest); err != nil {
		return fmt.Errorf("%s: %w", cmd.CommandPath(), err)
	}
	if pos := cmd.Flags().Args(); cmd.HasSubCommands() && len(pos) > 0 {
		return fmt.Errorf("%s: unknown command %q", cmd.CommandPath(), pos[0])
	}
	return nil
}

// documentedCommands reads the examples: fenced and indented blocks of the
// Markdown files, .EX/.EE and .nf/.fi blocks of the man pages.
func documentedCommands(t *testing.T) []docCommand {
	t.Helper()
	files, _ := filepath.Glob("../../docs/*.md")
	files = append([]string{"../../README.md"}, files...)
	mans, _ := filepath.Glob("../../man/*.[0-9]")
	var out []docCommand
	for _, f := range append(files, mans...) {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		name := strings.TrimPrefix(f, "../../")
		var blocks []block
		if strings.HasSuffix(f, ".md") {
			blocks = markdownBlocks(string(b))
		} else {
			blocks = manBlocks(string(b))
		}
		for _, bl := range blocks {
			out = append(out, blockCommands(name, bl)...)
		}
	}
	return out
}

// block is the lines of one example, first at line number first.
type block struct {
	first int
	lines []string
}

func markdownBlocks(text string) []block {
	var (
		out   []block
		cur   *block
		fence string
		prev  = ""
	)
	for i, l := range strings.Split(text, "\n") {
		trimmed := strings.TrimSpace(l)
		switch {
		case fence != "":
			if strings.HasPrefix(trimmed, fence) {
				fence = ""
				out = append(out, *cur)
				cur = nil
			} else {
				cur.lines = append(cur.lines, l)
			}
		case strings.HasPrefix(trimmed, "```") || strings.HasPrefix(trimmed, "~~~"):
			fence = trimmed[:3]
			cur = &block{first: i + 2}
		case strings.HasPrefix(l, "    ") && (prev == "" || cur != nil):
			if cur == nil {
				cur = &block{first: i + 1}
			}
			cur.lines = append(cur.lines, l[4:])
		default:
			if cur != nil {
				out = append(out, *cur)
				cur = nil
			}
		}
		prev = trimmed
	}
	return out
}

var roffEscapes = strings.NewReplacer(`\-`, "-", `\e`, `\`, `\(aq`, "'", `\(dq`, `"`, `\(ti`, "~", `\&`, "", `\~`, " ", `\(em`, "--")

func manBlocks(text string) []block {
	var (
		out []block
		cur *block
	)
	for i, l := range strings.Split(text, "\n") {
		switch {
		case l == ".EX" || l == ".nf":
			cur = &block{first: i + 2}
		case l == ".EE" || l == ".fi":
			if cur != nil {
				out = append(out, *cur)
			}
			cur = nil
		case cur != nil && !strings.HasPrefix(l, "."):
			cur.lines = append(cur.lines, roffEscapes.Replace(l))
		}
	}
	return out
}

// blockCommands joins continued lines and keeps the commands of the
// documented programs. A block with "$ " prompts shows output too: only its
// prompted lines are commands.
func blockCommands(file string, b block) []docCommand {
	prompted := slices.ContainsFunc(b.lines, func(l string) bool { return strings.HasPrefix(l, "$ ") })
	var out []docCommand
	for i := 0; i < len(b.lines); i++ {
		start, line := i, b.lines[i]
		for strings.HasSuffix(line, `\`) && i+1 < len(b.lines) {
			i++
			line = strings.TrimSuffix(line, `\`) + " " + strings.TrimSpace(b.lines[i])
		}
		if prompted {
			var ok bool
			if line, ok = strings.CutPrefix(line, "$ "); !ok {
				continue
			}
		}
		if errorOutput.MatchString(line) {
			continue
		}
		for _, words := range splitShell(line) {
			words = commandWords(words)
			if len(words) > 0 && slices.Contains(docPrograms, words[0]) {
				out = append(out, docCommand{where: fmt.Sprintf("%s:%d", file, b.first+start), argv: words})
			}
		}
	}
	return out
}

// errorOutput is a message the programs print, "simpletunerctl worker drain: …",
// shown as output in an example.
var errorOutput = regexp.MustCompile(`^(simpletunerctl|simpletuner-[a-z]+)( [a-z-]+)*: `)

// commandWords drops what comes before the program: shell keywords,
// variable assignments, sudo and its options.
func commandWords(w []string) []string {
	for len(w) > 0 {
		switch {
		case slices.Contains([]string{"if", "then", "else", "until", "while", "do", "!", "time", "exec"}, w[0]):
			w = w[1:]
		case w[0] == "sudo":
			w = w[1:]
			for len(w) > 0 && strings.HasPrefix(w[0], "-") {
				if w[0] == "-u" || w[0] == "-g" {
					w = w[1:]
				}
				w = w[1:]
			}
		case regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*=`).MatchString(w[0]) && len(w) > 1:
			w = w[1:]
		default:
			return w
		}
	}
	return nil
}

// splitShell splits one shell line into its simple commands, words unquoted.
// A command substitution is a command of its own, "$(…)" in its word;
// redirections and comments are dropped. It knows the shell the examples
// use, not all of it.
func splitShell(s string) [][]string {
	var (
		cmds  [][]string
		words []string
		word  strings.Builder
		in    bool // a word has started
	)
	endWord := func() {
		if in {
			words = append(words, word.String())
		}
		word.Reset()
		in = false
	}
	endCmd := func() {
		endWord()
		if len(words) > 0 {
			cmds = append(cmds, words)
		}
		words = nil
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '\'':
			j := strings.IndexByte(s[i+1:], '\'')
			if j < 0 {
				j = len(s) - i - 1
			}
			word.WriteString(s[i+1 : i+1+j])
			in, i = true, i+1+j
		case c == '"':
			j := i + 1
			for ; j < len(s) && s[j] != '"'; j++ {
				if s[j] == '\\' && j+1 < len(s) {
					j++
				}
				word.WriteByte(s[j])
			}
			in, i = true, j
		case c == '\\' && i+1 < len(s):
			i++
			word.WriteByte(s[i])
			in = true
		case c == '$' && i+1 < len(s) && s[i+1] == '(':
			depth, j := 1, i+2
			for ; j < len(s) && depth > 0; j++ {
				switch s[j] {
				case '(':
					depth++
				case ')':
					depth--
				}
			}
			cmds = append(cmds, splitShell(s[i+2:j-1])...)
			word.WriteString("$(…)")
			in, i = true, j-1
		case c == '#' && !in:
			i = len(s)
		case c == ' ' || c == '\t' || c == '\n':
			endWord()
		case c == '>' || c == '<':
			if w := word.String(); in && strings.Trim(w, "0123456789") == "" {
				word.Reset() // a file descriptor: 2>&1
				in = false
			}
			endWord()
			for i+1 < len(s) && (s[i+1] == '>' || s[i+1] == '&') {
				i++
			}
			for i+1 < len(s) && s[i+1] == ' ' {
				i++
			}
			for i+1 < len(s) && !strings.ContainsRune(" ;|&)", rune(s[i+1])) {
				i++ // the target
			}
		case strings.IndexByte("|;&()", c) >= 0:
			endCmd()
		default:
			word.WriteByte(c)
			in = true
		}
	}
	endCmd()
	return cmds
}

// ctlParses finds the command of a simpletunerctl line in its command tree
// and checks its flags and arguments the way cobra does before running it.
func ctlParses(args []string) (*cobra.Command, error) {
	root := ctl.Command()
	cmd, rest, err := root.Find(args)
	if err != nil {
		return nil, err
	}
	if err := cmd.ParseFlags(rest); err != nil {
		return cmd, fmt.Errorf("%s: %w", cmd.CommandPath(), err)
	}
	positional := cmd.Flags().Args()
	if cmd.HasSubCommands() && len(positional) > 0 {
		return cmd, fmt.Errorf("%s: unknown command %q", cmd.CommandPath(), positional[0])
	}
	if err := cmd.ValidateArgs(positional); err != nil {
		return cmd, fmt.Errorf("%s: %w", cmd.CommandPath(), err)
	}
	if err := cmd.ValidateRequiredFlags(); err != nil {
		return cmd, fmt.Errorf("%s: %w", cmd.CommandPath(), err)
	}
	return cmd, cmd.ValidateFlagGroups()
}

// workerdParses checks workerd's flags; the configuration itself is the
// worker machine's and is not judged here.
func workerdParses(args []string) error {
	_, opts, err := config.LoadWorker(args, func(string) string { return "" })
	if ue, ok := errors.AsType[*config.UsageError](err); ok {
		return ue
	}
	if len(opts.Args) > 0 {
		return fmt.Errorf("unexpected argument %q", opts.Args[0])
	}
	return nil
}

// docsFixture is an orchestrator holding the objects the examples name.
type docsFixture struct {
	t             *testing.T
	o             *Orch
	home, dir     string
	jobID         string // a job that ended
	substitutions *strings.Replacer
	parsedOnly    bool // the last command checked was not run
}

func newDocsFixture(t *testing.T) *docsFixture {
	// The person the people commands name exists: only a sign-in makes one.
	stateDir := filepath.Join(t.TempDir(), "state")
	SeedPerson(t, stateDir, DocPersonID, "ada")
	o := StartOrchestratorWith(t, OrchOptions{StateDir: stateDir,
		ExtraTOML: "[[teams]]\nname = \"nlp\"\nshare = 1\n[[teams]]\nname = \"vision\"\nshare = 2\n" +
			"[[approval_rules]]\nname = \"big-jobs\"\ngpus_over = 4\n"})
	d := &docsFixture{t: t, o: o, home: t.TempDir(), dir: t.TempDir()}
	// A job that ended, so that following its log ends too.
	d.jobID = o.Submit(map[string]any{"steps": 1}, nil)
	d.cancel(d.jobID)
	o.WaitJob(d.jobID, "cancelled", 30*time.Second)
	files := map[string]string{filepath.Join(d.home, ".config/simpletuner/token"): o.Admin + "\n",
		filepath.Join(d.dir, "run.json"): exampleJSONConf}
	for _, name := range exampleConfigs {
		files[filepath.Join(o.ConfigsDir(), name+".json")] = exampleJSONConf
	}
	for path, content := range files {
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return d
}

func (d *docsFixture) cancel(job string) {
	if st, m := d.o.Do("POST", "/api/queue/"+job+"/cancel", nil); st != 200 {
		d.t.Fatalf("cancel %s: %d %v", job, st, m)
	}
}

// prepare puts the orchestrator in the state a documented simpletunerctl
// line expects: the example workers and webhook exist, except the one it
// creates (and its credential file); a line that cancels gets a job of its
// own to cancel, and a submit --after one that has not ended. Then it sets
// the substitutions for the line.
func (d *docsFixture) prepare(path string, positional []string, after bool) {
	creates := ""
	if (path == "worker create" || path == "webhooks create") && len(positional) > 0 {
		creates = positional[0]
	}
	workers := d.workers()
	for _, name := range exampleWorkers {
		switch id, ok := workers[name]; {
		case name == creates && ok:
			if st, m := d.o.Do("DELETE", "/api/admin/workers/"+id, nil); st != 200 {
				d.t.Fatalf("delete worker %s: %d %v", name, st, m)
			}
		case name != creates && !ok:
			workers[name], _ = d.o.CreateWorker(name, true, map[string]string{"gpu_type": "a100"})
		}
	}
	for _, name := range slices.Compact([]string{exampleWebhook, creates}) {
		if name == "" {
			continue
		}
		st, _ := d.o.Do("GET", "/api/admin/webhooks/"+name, nil)
		switch {
		case name == creates && st == 200:
			if st, m := d.o.Do("DELETE", "/api/admin/webhooks/"+name, nil); st != 200 {
				d.t.Fatalf("delete webhook %s: %d %v", name, st, m)
			}
		case name == exampleWebhook && name != creates && st == 404:
			if st, m := d.o.Do("POST", "/api/admin/webhooks", map[string]any{"name": name, "url": "https://hooks.example.com/st",
				"events": []string{"job.failed"}}); st != 201 {
				d.t.Fatalf("create webhook %s: %d %v", name, st, m)
			}
		}
	}
	if path == "worker create" {
		// The credential file a worker machine does not have yet.
		if err := os.Remove(filepath.Join(d.dir, "worker-token")); err != nil && !os.IsNotExist(err) {
			d.t.Fatal(err)
		}
	}
	job := d.jobID
	switch path {
	case "cancel":
		job = d.o.Submit(map[string]any{"steps": 1}, nil)
	case "submit":
		if after {
			job = d.o.Submit(map[string]any{"steps": 1}, nil)
		}
	case "approvals approve", "approvals reject":
		// A job the fixture's rule (more than 4 GPUs) holds.
		job = d.o.Submit(map[string]any{"steps": 1}, map[string]any{"gpu_count": 8})
	}
	d.substitutions = strings.NewReplacer(
		"$job", job, "$id", job, "j_abc123", job, "w_abc123", workers["gpu-worker-1"],
		"/etc/simpletuner/worker-token", filepath.Join(d.dir, "worker-token"), "/tmp/st-quick/worker-token", filepath.Join(d.dir, "worker-token"),
		"~/", d.home+"/", "$SIMPLETUNER_URL", d.o.URL,
		"http://localhost:8001", d.o.URL, "https://orch:8001", d.o.URL, "http://orchestrator:8001", d.o.URL, "http://127.0.0.1:8001", d.o.URL,
		"$H", "Authorization: Bearer "+d.o.Admin, "$TOKEN", d.o.Admin, "$SIMPLETUNER_ADMIN_TOKEN", d.o.Admin,
	)
}

// workers maps the orchestrator's worker names to their IDs.
func (d *docsFixture) workers() map[string]string {
	st, m := d.o.Do("GET", "/api/admin/workers?limit=1000", nil)
	if st != 200 {
		d.t.Fatalf("list workers: %d %v", st, m)
	}
	out := map[string]string{}
	list, _ := m["workers"].([]any)
	for _, w := range list {
		w, _ := w.(map[string]any)
		name, _ := w["name"].(string)
		id, _ := w["worker_id"].(string)
		out[name] = id
	}
	return out
}

func (d *docsFixture) substitute(args []string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		out[i] = d.substitutions.Replace(a)
	}
	return out
}

// run runs a program the way a user in d.home would; it returns its
// standard output.
func (d *docsFixture) run(name string, args ...string) (string, error) {
	d.parsedOnly = false
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = d.dir
	cmd.Stdin = strings.NewReader(exampleJSONConf) // what "echo '{…}' | simpletunerctl submit -" pipes
	cmd.Env = append(os.Environ(), "HOME="+d.home, "NO_COLOR=1", "SIMPLETUNER_URL="+d.o.URL, "SIMPLETUNER_ADMIN_TOKEN="+d.o.Admin)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return string(out), fmt.Errorf("%v\n%s%s", err, out, stderr.String())
	}
	return string(out), nil
}

func (d *docsFixture) ctl(args []string) error {
	cmd, err := ctlParses(args)
	if err != nil {
		return err
	}
	path := strings.TrimPrefix(cmd.CommandPath(), "simpletunerctl ")
	if _, ok := parseOnlyCommands[path]; ok || slices.ContainsFunc(args, func(a string) bool { return slices.Contains(foreverFlags, a) }) {
		return nil
	}
	d.prepare(path, cmd.Flags().Args(), cmd.Flags().Changed("after"))
	_, err = d.run(filepath.Join(BinDir, "simpletunerctl"), d.substitute(args)...)
	return err
}

// orchestratord runs the token commands against the test's orchestrator and
// checks every other line with --check-config, which reads the command line
// (subcommand included) and the configuration, then stops.
func (d *docsFixture) orchestratord(args []string) error {
	d.prepare("", nil, false)
	args = d.substitute(args)
	for i := 0; i+1 < len(args); i++ {
		if args[i] == "--config" {
			args = slices.Delete(args, i, i+2)
			break
		}
	}
	args = append([]string{"--config", d.o.Conf}, args...)
	if !slices.Contains(args, "token") || slices.Contains(args, "revoke") {
		args = append([]string{"--check-config"}, args...)
	}
	_, err := d.run(filepath.Join(BinDir, "simpletuner-orchestratord"), args...)
	return err
}

// curl sends the documented requests to the API. GET requests must answer
// 2xx. Requests that change something are sent about objects that do not
// exist (w_abc123 and j_abc123 become absent IDs), so that they change
// nothing the other examples show, yet prove their method, path and body
// right: they may answer 2xx, 404 for the object or 409, never "no such
// endpoint", 405, 400 or 422.
func (d *docsFixture) curl(args []string) error {
	d.prepare("", nil, false)
	writes := slices.ContainsFunc(args, func(a string) bool {
		return a == "-X" || a == "-T" || a == "--data" || strings.HasPrefix(a, "-d")
	})
	if writes {
		args = d.substitute(absentObjects(args))
	} else {
		args = d.substitute(args)
	}
	url := ""
	for _, a := range args {
		if strings.HasPrefix(a, d.o.URL) {
			url = a
		}
	}
	if url == "" {
		if strings.Contains(strings.Join(args, " "), "/api/") {
			return fmt.Errorf("a request to the API at an address the test does not know")
		}
		return nil // not the orchestrator's API: a job's upload endpoint
	}
	for _, re := range parseOnlyRequests {
		if re.MatchString(url) {
			return nil
		}
	}
	body := filepath.Join(d.dir, "curl-body")
	out, err := d.run("curl", append([]string{"--max-time", "20", "-w", "%{http_code}"}, append(args, "-o", body)...)...)
	if err != nil {
		return err
	}
	status := strings.TrimSpace(out)
	b, _ := os.ReadFile(body)
	switch {
	case strings.HasPrefix(status, "2"):
		return nil
	case writes && status == "409", writes && status == "404" && !strings.Contains(string(b), "no such endpoint"):
		return nil
	case writes && status == "422" && strings.Contains(string(b), "no job j_absent000000"):
		return nil // the body names a job, and the test made it an absent one
	}
	return fmt.Errorf("HTTP status %s: %s", status, b)
}

// absentObjects points a request that changes something at objects that do
// not exist.
func absentObjects(args []string) []string {
	r := strings.NewReplacer("w_abc123", "w_absent000000", "j_abc123", "j_absent000000")
	out := make([]string, len(args))
	for i, a := range args {
		out[i] = r.Replace(a)
	}
	return out
}
