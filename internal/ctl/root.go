// Package ctl is simpletunerctl: the command-line client of
// simpletuner-orchestratord's public HTTP API. Each file holds one family of
// commands (jobs, workers, admin); rendering lives in render.go so that the
// golden tests can drive it with recorded replies.
package ctl

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/simpletuner/simpletuner-orchestration/internal/ctl/client"
	"github.com/simpletuner/simpletuner-orchestration/internal/ctl/ctlconf"
	"github.com/simpletuner/simpletuner-orchestration/internal/ctl/output"
	"github.com/simpletuner/simpletuner-orchestration/internal/version"
)

// Exit statuses, documented in simpletunerctl(1); scripts rely on them.
const (
	ExitOK       = 0
	ExitFailed   = 1 // the operation failed (or, with --wait, the job did)
	ExitUsage    = 2 // bad command line, or a name that matches several objects
	ExitNotFound = 3 // no such job, worker, token or endpoint
	ExitAuth     = 4 // 401 or 403: missing, wrong or insufficient credential
)

// Env is everything simpletunerctl takes from its process, so that tests run
// it in-process.
type Env struct {
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	Getenv         func(string) string
	Now            func() time.Time
	// StdoutTTY turns on colour (unless NO_COLOR is set) and screen redraws for --watch.
	StdoutTTY bool
	// Socket is the admin socket tried when no URL is configured.
	Socket string
	// StdinTTY: standard input is a terminal, so login may ask for a user
	// name and password (ReadPassword reads one without echo) and an
	// expired login is asked for again.
	StdinTTY     bool
	ReadPassword func() (string, error)
}

// app holds the global flags and what they resolve to.
type app struct {
	env Env

	url, tokenFile, caFile, certFile, keyFile string
	outputFlag                                string
	timeout                                   time.Duration

	format output.Format
	style  output.Styler
	cl     *client.Client
	// tokenSource says where the token in use came from, for whoami.
	tokenSource string
}

// Main runs simpletunerctl with args (without the program name) and returns
// its exit status. Errors go to env.Stderr as one line prefixed with the command.
func Main(ctx context.Context, args []string, env Env) int {
	if env.Getenv == nil {
		env.Getenv = func(string) string { return "" }
	}
	if env.Now == nil {
		env.Now = time.Now
	}
	if env.Stdin == nil {
		env.Stdin = strings.NewReader("")
	}
	if env.Socket == "" {
		env.Socket = client.DefaultSocket
	}
	a := &app{env: env}
	root := a.rootCommand()
	root.SetArgs(args)
	cmd, err := checkCommandName(root, args)
	if err == nil {
		cmd, err = root.ExecuteContextC(ctx)
	}
	if err == nil {
		return ExitOK
	}
	code := exitCode(err)
	var (
		se  *silentError
		amb *ambiguousError
	)
	if !errors.As(err, &se) {
		name := root.Name()
		if cmd != nil {
			name = cmd.CommandPath()
		}
		msg := err.Error()
		if errors.Is(err, context.Canceled) {
			msg = "interrupted"
		}
		fmt.Fprintf(env.Stderr, "%s: %s\n", name, output.Sanitize(oneLine(msg)))
		if code == ExitUsage && cmd != nil && !errors.As(err, &amb) {
			fmt.Fprintf(env.Stderr, "Run '%s --help' for usage.\n", cmd.CommandPath())
		}
	}
	return code
}

func oneLine(s string) string {
	if !strings.ContainsAny(s, "\r\n") {
		return s
	}
	return strings.Join(strings.Fields(s), " ")
}

// Command returns the command tree with a default environment; the man page
// test walks it to check that every command and flag is documented.
func Command() *cobra.Command {
	a := &app{env: Env{Getenv: os.Getenv, Now: time.Now, Stdout: io.Discard, Stderr: io.Discard}}
	return a.rootCommand()
}

// Errors that choose the exit status.
type (
	usageError    struct{ msg string }
	notFoundError struct{ msg string }
	// silentError carries an exit status for a failure already reported.
	silentError struct{ code int }
)

func (e *usageError) Error() string    { return e.msg }
func (e *notFoundError) Error() string { return e.msg }
func (e *silentError) Error() string   { return fmt.Sprintf("exit status %d", e.code) }

func usagef(format string, args ...any) error {
	return &usageError{fmt.Sprintf(format, args...)}
}

func notFoundf(format string, args ...any) error {
	return &notFoundError{fmt.Sprintf(format, args...)}
}

// ambiguousError is a name or prefix that matches several objects: a usage
// problem, as the user has to say more.
type ambiguousError struct{ msg string }

func (e *ambiguousError) Error() string { return e.msg }

// exitCode maps an error to the documented exit statuses.
func exitCode(err error) int {
	var (
		ue  *usageError
		amb *ambiguousError
		nf  *notFoundError
		se  *silentError
		ae  *client.APIError
	)
	switch {
	case err == nil:
		return ExitOK
	case errors.As(err, &se):
		return se.code
	case errors.As(err, &ue), errors.As(err, &amb):
		return ExitUsage
	case errors.As(err, &nf):
		return ExitNotFound
	case errors.As(err, new(*loginExpiredError)):
		return ExitAuth
	case errors.As(err, &ae):
		switch ae.Status {
		case 404:
			return ExitNotFound
		case 401, 403:
			return ExitAuth
		}
	}
	return ExitFailed
}

func (a *app) rootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:   "simpletunerctl",
		Short: "Command-line client of simpletuner-orchestratord",
		Long: `simpletunerctl submits and follows training jobs and manages the workers,
tokens and audit log of a simpletuner-orchestratord, through its public HTTP API.

It connects to --url, SIMPLETUNER_URL, the url in ~/.config/simpletuner/ctl.toml,
else the local admin socket /run/simpletuner/orchestratord.sock when it is usable,
else http://localhost:8001.

Exit status: 0 ok, 1 the operation failed, 2 usage, 3 not found, 4 not authorised.`,
		Version:       version.Version,
		SilenceErrors: true,
		SilenceUsage:  true,
		Args:          cobra.NoArgs,
		PersistentPreRunE: func(cmd *cobra.Command, args []string) error {
			return a.prepare()
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			return usagef("a command is required: %s", strings.Join(commandNames(cmd), ", "))
		},
	}
	root.SetVersionTemplate("simpletunerctl {{.Version}}\n")
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return &usageError{err.Error()} })

	pf := root.PersistentFlags()
	pf.StringVar(&a.url, "url", "", "orchestrator URL: http(s)://host:port or unix:///path.sock (env SIMPLETUNER_URL)")
	pf.StringVar(&a.tokenFile, "token-file", "", "file holding the admin token (else SIMPLETUNER_ADMIN_TOKEN, else ctl.toml)")
	pf.StringVar(&a.caFile, "ca-file", "", "PEM file of the CA that signed the orchestrator's certificate")
	pf.StringVar(&a.certFile, "cert-file", "", "client certificate (PEM) for orchestrators that require mTLS")
	pf.StringVar(&a.keyFile, "key-file", "", "key of the client certificate (PEM)")
	pf.StringVarP(&a.outputFlag, "output", "o", "table", "output format: table, wide or json")
	pf.DurationVar(&a.timeout, "timeout", 30*time.Second, "time limit of each request (streams have none)")
	_ = root.RegisterFlagCompletionFunc("output", cobra.FixedCompletions([]string{"table", "wide", "json"}, cobra.ShellCompDirectiveNoFileComp))

	root.AddGroup(&cobra.Group{ID: "jobs", Title: "Jobs:"}, &cobra.Group{ID: "workers", Title: "Workers:"},
		&cobra.Group{ID: "admin", Title: "Administration:"})
	for _, c := range a.jobCommands() {
		c.GroupID = "jobs"
		root.AddCommand(c)
	}
	for _, c := range a.workerCommands() {
		c.GroupID = "workers"
		root.AddCommand(c)
	}
	for _, c := range append(a.adminCommands(), a.loginCommands()...) {
		c.GroupID = "admin"
		root.AddCommand(c)
	}
	root.AddCommand(&cobra.Command{
		Use:   "version",
		Short: "Print simpletunerctl's version",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if a.format == output.JSONFormat {
				return output.MarshalJSON(a.env.Stdout, map[string]string{"version": version.Version})
			}
			_, err := fmt.Fprintln(a.env.Stdout, "simpletunerctl", version.Version)
			return err
		},
	})

	// cobra adds these two at execution; adding them now lets wrapUsage see
	// them. The completion command takes its output stream when added.
	root.SetIn(a.env.Stdin)
	root.SetOut(a.env.Stdout)
	root.SetErr(a.env.Stderr)
	root.InitDefaultHelpCmd()
	root.InitDefaultCompletionCmd()
	wrapUsage(root)
	return root
}

// wrapUsage makes cobra's argument checks (unknown command, wrong number of
// arguments) usage errors, for every command in the tree.
func wrapUsage(c *cobra.Command) {
	if args := c.Args; args != nil {
		c.Args = func(cmd *cobra.Command, a []string) error {
			if err := args(cmd, a); err != nil {
				return &usageError{err.Error()}
			}
			return nil
		}
	}
	for _, sub := range c.Commands() {
		wrapUsage(sub)
	}
}

func commandNames(c *cobra.Command) []string {
	var out []string
	for _, s := range c.Commands() {
		if s.IsAvailableCommand() {
			out = append(out, s.Name())
		}
	}
	return out
}

// checkCommandName refuses a command line whose command word names no
// command, before cobra parses flags: "token create --name x" would
// otherwise be reported as an unknown flag of the root, or, without flags,
// show the help. It returns the command whose subcommands were searched.
func checkCommandName(root *cobra.Command, args []string) (*cobra.Command, error) {
	cmd, rest, err := root.Find(args)
	if err != nil || !cmd.HasSubCommands() {
		return nil, nil
	}
	word := firstWord(cmd, rest)
	if word == "" || word == "help" || strings.HasPrefix(word, cobra.ShellCompRequestCmd) {
		return nil, nil // cobra's own help and completion commands are added at execution
	}
	return cmd, unknownCommand(cmd, word)
}

// firstWord is the first argument that is neither a flag nor a flag's value,
// skipping values the way cobra does when it looks for a command.
func firstWord(cmd *cobra.Command, args []string) string {
	flags := cmd.Flags()
	flags.AddFlagSet(cmd.InheritedFlags())
	takesValue := func(f *pflag.Flag) bool { return f == nil || f.NoOptDefVal == "" }
	for i := 0; i < len(args); i++ {
		s := args[i]
		switch {
		case s == "--":
			return ""
		case strings.HasPrefix(s, "--") && !strings.Contains(s, "="):
			if takesValue(flags.Lookup(s[2:])) {
				i++
			}
		case strings.HasPrefix(s, "-") && len(s) == 2:
			if takesValue(flags.ShorthandLookup(s[1:])) {
				i++
			}
		case s != "" && !strings.HasPrefix(s, "-"):
			return s
		}
	}
	return ""
}

// unknownCommand names the closest commands to a misspelled one, else
// lists them all.
func unknownCommand(parent *cobra.Command, name string) error {
	parent.SuggestionsMinimumDistance = 2 // cobra's own default, which it sets only on its legacy path
	if close := parent.SuggestionsFor(name); len(close) > 0 {
		for i, c := range close {
			close[i] = strconv.Quote(c)
		}
		return usagef("unknown command %q; did you mean %s?", name, strings.Join(close, " or "))
	}
	return usagef("unknown command %q; commands: %s", name, strings.Join(commandNames(parent), ", "))
}

// group is a command that only holds subcommands; run alone or with an
// unknown subcommand it is a usage error, not a help page with status 0.
func group(use, short string, subs ...*cobra.Command) *cobra.Command {
	g := &cobra.Command{
		Use:   use,
		Short: short,
		Args:  cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return unknownCommand(cmd, args[0])
			}
			return usagef("a subcommand is required: %s", strings.Join(commandNames(cmd), ", "))
		},
	}
	g.AddCommand(subs...)
	return g
}

// prepare resolves the output format and colour; the connection is made on
// first use, so that commands that need none never read ctl.toml.
func (a *app) prepare() error {
	f, err := output.ParseFormat(a.outputFlag)
	if err != nil {
		return &usageError{err.Error()}
	}
	a.format = f
	_, noColor := lookupEnv(a.env.Getenv, "NO_COLOR")
	a.style = output.Styler{On: a.env.StdoutTTY && !noColor && a.env.Getenv("TERM") != "dumb"}
	return nil
}

// lookupEnv reports a variable as set when it is non-empty (NO_COLOR's rule).
func lookupEnv(getenv func(string) string, k string) (string, bool) {
	v := getenv(k)
	return v, v != ""
}

// client connects on first use: URL, token and TLS files from flags, then the
// environment, then ctl.toml.
func (a *app) client() (*client.Client, error) {
	if a.cl != nil {
		return a.cl, nil
	}
	file, err := ctlconf.Load(ctlconf.DefaultPath(a.env.Getenv))
	if err != nil {
		return nil, err
	}
	if file == nil {
		file = &ctlconf.File{}
	}
	url := chooseURL(a.env.Socket, a.url, a.env.Getenv("SIMPLETUNER_URL"), file.URL)
	token, err := a.token(file, url)
	if err != nil {
		return nil, err
	}
	cl, err := client.New(client.Options{
		URL: url, Token: token, Timeout: a.timeout,
		CAFile: first(a.caFile, file.CAFile), CertFile: first(a.certFile, file.CertFile), KeyFile: first(a.keyFile, file.KeyFile),
		UserAgent: "simpletunerctl/" + version.Version,
	})
	if err != nil {
		return nil, &usageError{err.Error()}
	}
	a.cl = cl
	return cl, nil
}

// chooseURL takes the first URL configured, else the admin socket when it
// accepts connections (an admin on the orchestrator's machine needs no
// token there), else the default TCP address.
func chooseURL(socket string, configured ...string) string {
	if u := first(configured...); u != "" {
		return u
	}
	if client.SocketUsable(socket) {
		return "unix://" + socket
	}
	return client.DefaultURL
}

// token is the admin token to send: --token-file, SIMPLETUNER_ADMIN_TOKEN,
// ctl.toml's token_file or token, else the login for url in login.toml.
func (a *app) token(file *ctlconf.File, url string) (string, error) {
	readFile := func(p, what string) (string, error) {
		b, err := os.ReadFile(p)
		if err != nil {
			return "", fmt.Errorf("reading the admin token (%s): %w", what, err)
		}
		t := strings.TrimSpace(string(b))
		if t == "" {
			return "", fmt.Errorf("the token file %s (%s) is empty", p, what)
		}
		if strings.ContainsAny(t, "\r\n\t ") {
			return "", fmt.Errorf("the token file %s (%s) must hold one token on one line", p, what)
		}
		return t, nil
	}
	switch {
	case a.tokenFile != "":
		a.tokenSource = "--token-file"
		return readFile(a.tokenFile, "--token-file")
	case a.env.Getenv("SIMPLETUNER_ADMIN_TOKEN") != "":
		a.tokenSource = "SIMPLETUNER_ADMIN_TOKEN"
		return strings.TrimSpace(a.env.Getenv("SIMPLETUNER_ADMIN_TOKEN")), nil
	case file.TokenFile != "":
		a.tokenSource = "token_file in " + file.Path
		return readFile(file.TokenFile, "token_file in "+file.Path)
	case file.Token != "":
		a.tokenSource = "token in " + file.Path
		return file.Token, nil
	case strings.HasPrefix(url, "unix:"):
		return "", nil
	}
	return a.loginToken(strings.TrimSuffix(url, "/"), file)
}

func first(vals ...string) string {
	for _, v := range vals {
		if v != "" {
			return v
		}
	}
	return ""
}

// out is where results go.
func (a *app) out() io.Writer { return a.env.Stdout }

// note writes a message for humans to stderr, keeping stdout for results.
func (a *app) note(format string, args ...any) {
	fmt.Fprintln(a.env.Stderr, output.Sanitize(fmt.Sprintf(format, args...)))
}
