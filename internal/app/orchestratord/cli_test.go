package orchestratord

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/simpletuner/simpletuner-orchestration/internal/testutil"

	"github.com/simpletuner/simpletuner-orchestration/internal/config"
)

// tokenConfig writes an orchestrator configuration whose state lives in dir.
func tokenConfig(t *testing.T, dir, socket string) string {
	t.Helper()
	path := filepath.Join(dir, "o.toml")
	conf := fmt.Sprintf("[server]\nlisten = [%q]\nadmin_socket = %q\n[paths]\nstate_dir = %q\nconfigs_dir = %q\n[metrics]\nlisten = \"\"\n",
		fmt.Sprintf("127.0.0.1:%d", testutil.MustFreePort(t)), socket, dir, dir)
	if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// appendTeam adds a [[teams]] entry to the configuration at path.
func appendTeam(t *testing.T, path, name string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := fmt.Fprintf(f, "[[teams]]\nname = %q\nshare = 1\n", name); err != nil {
		t.Fatal(err)
	}
}

func runMain(args ...string) (code int, stdout, stderr string) {
	var out, errb bytes.Buffer
	code = Main(args, func(string) string { return "" }, &out, &errb)
	return code, out.String(), errb.String()
}

// Help and a missing database touch nothing; the error names the path.
func TestTokenCommandNeverCreatesADatabase(t *testing.T) {
	dir := t.TempDir()
	conf := tokenConfig(t, dir, "")
	db := filepath.Join(dir, "orchestrator.db")
	for _, args := range [][]string{{"token", "--help"}, {"token", "create", "-h"}} {
		code, out, _ := runMain(append([]string{"--config", conf}, args...)...)
		if code != ExitOK || !strings.Contains(out, "token create --name NAME") {
			t.Errorf("%v: exit %d, output %q", args, code, out)
		}
	}
	if code, out, errOut := runMain("--config", conf, "token"); code != ExitUsage || out != "" || !strings.Contains(errOut, "token create --name NAME") {
		t.Errorf("token without its command: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	code, out, errOut := runMain("--config", conf, "token", "create", "--name", "ops", "--scope", "*")
	if code != ExitFailed || out != "" || !strings.Contains(errOut, db) || !strings.Contains(errOut, "nothing was created") {
		t.Errorf("create without a database: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	if _, err := os.Stat(db); !os.IsNotExist(err) {
		t.Fatalf("the token command created %s", db)
	}
}

// With the database present (the orchestrator ran before) and no admin
// socket, the token goes into that database, and the command says so.
func TestTokenCommandWritesTheExistingDatabase(t *testing.T) {
	dir := t.TempDir()
	conf := tokenConfig(t, dir, "")
	cfg, _, err := config.LoadOrchestrator([]string{"--config", conf}, func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	st, _, err := OpenStore(context.Background(), cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	st.Close()
	code, out, errOut := runMain("--config", conf, "token", "create", "--name", "ops", "--scope", "*")
	if code != ExitOK || !strings.HasPrefix(out, "sta_") || !strings.Contains(errOut, filepath.Join(dir, "orchestrator.db")) {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	code, out, _ = runMain("--config", conf, "token", "list")
	if code != ExitOK || !strings.Contains(out, "ops") || strings.Contains(out, "sta_") {
		t.Fatalf("list: exit %d, %q", code, out)
	}
	// A token granted priorities up to 30 keeps the grant in the database.
	code, _, errOut = runMain("--config", conf, "token", "create", "--name", "release", "--scope", "queue.submit", "--max-priority", "30")
	if code != ExitOK {
		t.Fatalf("create --max-priority: exit %d, %q", code, errOut)
	}
	st, _, err = OpenStore(context.Background(), cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ts, err := st.ListAdminTokens(context.Background())
	if err != nil || len(ts) != 2 || ts[1].Name != "release" || ts[1].MaxPriority == nil || *ts[1].MaxPriority != 30 || ts[0].MaxPriority != nil {
		t.Fatalf("tokens: %+v %v", ts, err)
	}
	if code, out, _ = runMain("--config", conf, "token", "list"); !regexp.MustCompile(`release\s+queue.submit\s+default\s+30\s`).MatchString(out) {
		t.Fatalf("list: exit %d, %q", code, out)
	}
}

// --team puts the token in a team of [[teams]], as simpletunerctl tokens
// create --team does; a team the configuration lacks is refused, naming the
// flag and the teams, and nothing is created.
func TestTokenCommandTeam(t *testing.T) {
	dir := t.TempDir()
	conf := tokenConfig(t, dir, "")
	appendTeam(t, conf, "nlp")
	cfg, _, err := config.LoadOrchestrator([]string{"--config", conf}, func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	st, _, err := OpenStore(context.Background(), cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()

	code, out, errOut := runMain("--config", conf, "token", "create", "--name", "nlp-ci", "--scope", "queue.submit", "--team", "vision")
	if code != ExitFailed || out != "" || !strings.Contains(errOut, `--team: unknown team "vision"; the teams are nlp, default`) {
		t.Errorf("unknown team: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	code, out, errOut = runMain("--config", conf, "token", "create", "--name", "nlp-ci", "--scope", "queue.submit", "--team", "nlp")
	if code != ExitOK || !strings.HasPrefix(out, "sta_") || !strings.Contains(errOut, "in team nlp") {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	code, out, errOut = runMain("--config", conf, "token", "create", "--name", "ops", "--scope", "*")
	if code != ExitOK || !strings.Contains(errOut, "in team default") {
		t.Fatalf("no --team: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	ts, err := st.ListAdminTokens(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	teams := map[string]string{}
	for _, tok := range ts {
		teams[tok.Name] = tok.Team
	}
	if len(ts) != 2 || teams["nlp-ci"] != "nlp" || teams["ops"] != "" {
		t.Fatalf("tokens stored: %+v", ts)
	}
	code, out, _ = runMain("--config", conf, "token", "list")
	if code != ExitOK || !regexp.MustCompile(`(?m)^\S+\s+nlp-ci\s+queue.submit\s+nlp\s`).MatchString(out) {
		t.Fatalf("list: exit %d:\n%s", code, out)
	}
}

// With the orchestrator running, the command goes through its admin socket.
func TestTokenCommandUsesTheAdminSocket(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("the admin socket admits root or members of the admin group; run as root")
	}
	dir := t.TempDir()
	socket := filepath.Join(dir, "o.sock")
	conf := tokenConfig(t, dir, socket)
	appendTeam(t, conf, "nlp")
	args := []string{"--config", conf}
	cfg, _, err := config.LoadOrchestrator(args, func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	level := new(slog.LevelVar)
	a := New(cfg, args, func(string) string { return "" }, slog.New(slog.DiscardHandler), level)
	ctx, cancel := context.WithCancel(context.Background())
	if err := a.Start(ctx); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = a.Serve(ctx); close(done) }()
	defer func() { cancel(); <-done }()

	code, out, errOut := runMain("--config", conf, "token", "create", "--name", "ops", "--scope", "queue.view", "--team", "nlp")
	if code != ExitOK || !strings.HasPrefix(out, "sta_") || !strings.Contains(errOut, "in team nlp through") || !strings.Contains(errOut, "admin socket "+socket) {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	ts, err := a.store.ListAdminTokens(context.Background())
	if err != nil || len(ts) != 1 || ts[0].Name != "ops" || ts[0].Team != "nlp" {
		t.Fatalf("tokens in the running orchestrator's store: %+v %v", ts, err)
	}
}

// The exit statuses and messages the man page gives for the command line:
// help on stdout, exit 0; bad usage named on stderr, exit 2, before anything
// is read or opened.
func TestCommandLineUsage(t *testing.T) {
	dir := t.TempDir()
	conf := tokenConfig(t, dir, "")
	code, out, _ := runMain("--help")
	if code != ExitOK || !strings.HasPrefix(out, "Usage:") || strings.Contains(out, "help requested") {
		t.Errorf("--help: exit %d:\n%s", code, out)
	}
	for _, want := range []string{"  --config file ", "  -v, --verbose ", " token create|list|revoke", " vacuum ", "simpletuner-orchestratord(8)"} {
		if !strings.Contains(out, want) {
			t.Errorf("--help lacks %q:\n%s", want, out)
		}
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--bogus"}, "flag provided but not defined: --bogus"},
		{[]string{"--config"}, "flag needs an argument: --config"},
		{[]string{"--config", conf, "serve"}, `unknown command "serve"`},
		{[]string{"--config", conf, "token", "rotate"}, `unknown token command "rotate"`},
		{[]string{"--config", conf, "token", "create", "--scope", "*"}, "--name is required"},
		{[]string{"--config", conf, "token", "create", "--name", "ops"}, "--scope is required"},
		{[]string{"--config", conf, "token", "create", "--name", "ops", "--scope", "root"}, `--scope: unknown scope "root"`},
		{[]string{"--config", conf, "token", "create", "--name", "ops", "--scope", "*", "extra"}, `unexpected argument "extra"`},
		{[]string{"--config", conf, "token", "create", "--name", "ops", "--scope", "queue.submit", "--max-priority", "51"}, `--max-priority: field "max_priority" must be from 0 to 50`},
		{[]string{"--config", conf, "token", "create", "--name", "ops", "--scope", "*", "--max-priority", "20"}, `a token with scope "*" may give any priority`},
		{[]string{"--config", conf, "token", "revoke"}, "the token's ID"},
		{[]string{"--config", conf, "token", "list", "all"}, "token list takes no argument"},
		{[]string{"--config", conf, "token", "create", "--name", "ops", "--scope", "*", "--team", "NLP!"}, `--team: "NLP!" is not a team name`},
	} {
		code, out, errOut := runMain(c.args...)
		if code != ExitUsage || out != "" || !strings.HasPrefix(errOut, "simpletuner-orchestratord: ") || !strings.Contains(errOut, c.want) {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want exit 2 and %q", c.args, code, out, errOut, c.want)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "orchestrator.db")); !os.IsNotExist(err) {
		t.Fatalf("a refused command line opened the database")
	}
}

// --check-config names every mistake of a file at once, each with its
// file:line, and exits 1.
func TestCheckConfigReportsEveryMistake(t *testing.T) {
	conf := filepath.Join(t.TempDir(), "o.toml")
	body := "[server]\nlisten = \"0.0.0.0:1\"\nbogus_key = 1\nmax_body_bytes = -5\n" +
		"[workers]\nheartbeat_timeout = \"fast\"\n[artifacts]\nreserve_percent = 80\n" +
		"[[teams]]\nname = \"Bad Name\"\nshare = 1\n[log]\nlevel = \"loud\"\n"
	if err := os.WriteFile(conf, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := runMain("--config", conf, "--check-config")
	for _, want := range []string{":2: key server.listen:", ":3: key server.bogus_key: unknown key", ":4: key server.max_body_bytes:",
		":6: key workers.heartbeat_timeout:", ":8: key artifacts.reserve_percent:", ":9: key teams: entry 1: name:", ":13: key log.level:"} {
		if !strings.Contains(errOut, conf+want) {
			t.Errorf("lacks %q", conf+want)
		}
	}
	if code != ExitFailed || out != "" || t.Failed() {
		t.Fatalf("exit %d, stdout %q\n%s", code, out, errOut)
	}
}
