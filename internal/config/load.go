package config

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"github.com/BurntSushi/toml"
)

// Options are the command-line switches that are not configuration values.
type Options struct {
	ConfigPath  string // the file that was (or would have been) read
	CheckConfig bool   // validate, print Redacted(), exit 0/1
	Version     bool
	Verbose     bool // also forces log.level = debug
	DetectGPUs  bool // worker only: print the GPU inventory and exit
	Args        []string
}

// binding ties an environment variable or flag to a dotted config key.
type binding struct{ name, key string }

var orchestratorEnv = []binding{
	{"SIMPLETUNER_LISTEN", "server.listen"},
	{"SIMPLETUNER_DATABASE_URL", "database.url"},
	{"SIMPLETUNER_STATE_DIR", "paths.state_dir"},
	{"SIMPLETUNER_CONFIGS_DIR", "paths.configs_dir"},
	{"SIMPLETUNER_HEARTBEAT_TIMEOUT", "workers.heartbeat_timeout"},
	{"SIMPLETUNER_LOG_LEVEL", "log.level"},
	{"SIMPLETUNER_TLS_CERT_FILE", "tls.cert_file"},
	{"SIMPLETUNER_TLS_KEY_FILE", "tls.key_file"},
	{"SIMPLETUNER_LDAP_BIND_PASSWORD", "auth.ldap.bind_password"},
}

var workerEnv = []binding{
	{"SIMPLETUNER_ORCHESTRATOR_URL", "orchestrator.url"},
	{"SIMPLETUNER_WORKER_TOKEN", "orchestrator.token"},
	{"SIMPLETUNER_WORKER_NAME", "worker.name"},
	{"SIMPLETUNER_WORKER_PERSISTENT", "worker.persistent"},
	{"SIMPLETUNER_SSL_NO_VERIFY", "orchestrator.insecure_skip_verify"},
	{"SIMPLETUNER_LOG_LEVEL", "log.level"},
}

// Flags that map straight onto a key; --host/--port/--ssl/-v are handled by hand.
var orchestratorFlagKeys = []binding{
	{"ssl-cert", "tls.cert_file"},
	{"ssl-key", "tls.key_file"},
}

var workerFlagKeys = []binding{
	{"orchestrator-url", "orchestrator.url"},
	{"worker-token", "orchestrator.token"},
	{"name", "worker.name"},
	{"persistent", "worker.persistent"},
	{"ssl-no-verify", "orchestrator.insecure_skip_verify"},
}

// textFlag records a flag's raw text so it can be applied after the file and
// environment, with the same conversion as an environment variable.
type textFlag struct {
	val    string
	isBool bool
}

func (t *textFlag) String() string     { return t.val }
func (t *textFlag) Set(s string) error { t.val = s; return nil }
func (t *textFlag) IsBoolFlag() bool   { return t.isBool }

func commonFlags(fs *flag.FlagSet, o *Options, def string) {
	fs.StringVar(&o.ConfigPath, "config", def, "configuration `file`; the default one may be missing (built-in defaults then)")
	fs.BoolVar(&o.CheckConfig, "check-config", false, "validate the configuration, print it with secrets redacted, and exit")
	fs.BoolVar(&o.Verbose, "v", false, "shorthand for --verbose")
	fs.BoolVar(&o.Verbose, "verbose", false, "log at debug level")
	fs.BoolVar(&o.Version, "version", false, "print the version and exit")
}

func orchestratorFlagSet(o *Options) *flag.FlagSet {
	fs := flag.NewFlagSet("simpletuner-orchestratord", flag.ContinueOnError)
	commonFlags(fs, o, DefaultOrchestratorPath)
	fs.Var(&textFlag{}, "host", "listen `address` (replaces server.listen; keeps its port, else 8001)")
	fs.Var(&textFlag{}, "port", "listen `port` (replaces server.listen; keeps its host)")
	fs.Var(&textFlag{isBool: true}, "ssl", "serve HTTPS; needs --ssl-cert and --ssl-key")
	fs.Var(&textFlag{}, "ssl-cert", "TLS certificate `file` (tls.cert_file)")
	fs.Var(&textFlag{}, "ssl-key", "TLS key `file` (tls.key_file)")
	return fs
}

func workerFlagSet(o *Options) *flag.FlagSet {
	fs := flag.NewFlagSet("simpletuner-workerd", flag.ContinueOnError)
	commonFlags(fs, o, DefaultWorkerPath)
	fs.BoolVar(&o.DetectGPUs, "detect-gpus", false, "print the GPU inventory as JSON and exit")
	fs.Var(&textFlag{}, "orchestrator-url", "orchestrator `URL` (orchestrator.url)")
	fs.Var(&textFlag{}, "worker-token", "worker `token` (orchestrator.token; visible in ps until read and in shell history: use token_file or SIMPLETUNER_WORKER_TOKEN)")
	fs.Var(&textFlag{}, "name", "worker `name` (worker.name)")
	fs.Var(&textFlag{isBool: true}, "persistent", "register as a persistent worker (worker.persistent)")
	fs.Var(&textFlag{isBool: true}, "ssl-no-verify", "skip TLS verification, development only (orchestrator.insecure_skip_verify)")
	return fs
}

// UsageError is a command line that cannot be used: an unknown flag, a flag
// without its value, an unknown command or a missing argument. Its message
// names what is wrong; the daemons exit with their usage status on it.
type UsageError struct{ Err error }

func (e *UsageError) Error() string { return e.Err.Error() }
func (e *UsageError) Unwrap() error { return e.Err }

// parseFlags parses args. -h and --help give flag.ErrHelp; a flag that
// cannot be parsed gives a *UsageError naming it as it is written, --name.
func parseFlags(fs *flag.FlagSet, args []string) (map[string]bool, error) {
	fs.SetOutput(io.Discard)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil, err
		}
		return nil, &UsageError{errors.New(doubleDash(err.Error()))}
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	return set, nil
}

// doubleDash rewrites the flag package's "-name" in its messages as the
// "--name" the documentation uses (a one-letter flag keeps its one dash).
func doubleDash(msg string) string {
	return flagInMessage.ReplaceAllStringFunc(msg, func(m string) string {
		if len(m) > 3 { // " -" and more than one letter
			return " --" + m[2:]
		}
		return m
	})
}

var flagInMessage = regexp.MustCompile(` -[a-zA-Z][-a-zA-Z0-9]*`)

// OrchestratorFlagHelp and WorkerFlagHelp list each daemon's flags for
// --help: one a line with its argument, then what it does.
func OrchestratorFlagHelp() string { return flagHelp(orchestratorFlagSet(&Options{})) }
func WorkerFlagHelp() string       { return flagHelp(workerFlagSet(&Options{})) }

func flagHelp(fs *flag.FlagSet) string {
	short := map[string]string{} // long name → its one-letter shorthand
	fs.VisitAll(func(f *flag.Flag) {
		if long, ok := strings.CutPrefix(f.Usage, "shorthand for --"); ok && len(f.Name) == 1 {
			short[long] = f.Name
		}
	})
	var rows [][2]string
	width := 0
	fs.VisitAll(func(f *flag.Flag) {
		if len(f.Name) == 1 && short[strings.TrimPrefix(f.Usage, "shorthand for --")] == f.Name {
			return // listed with its long name
		}
		arg, usage := flag.UnquoteUsage(f)
		name := "--" + f.Name
		if s, ok := short[f.Name]; ok {
			name = "-" + s + ", " + name
		}
		if arg != "" && !isBoolFlag(f) {
			name += " " + arg
		}
		if f.DefValue != "" && f.DefValue != "false" {
			usage += fmt.Sprintf(" (default %s)", f.DefValue)
		}
		rows = append(rows, [2]string{name, usage})
		width = max(width, len(name))
	})
	var b strings.Builder
	for _, r := range rows {
		fmt.Fprintf(&b, "  %-*s  %s\n", width, r[0], r[1])
	}
	return b.String()
}

func isBoolFlag(f *flag.Flag) bool {
	b, ok := f.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

func flagNames(fs *flag.FlagSet) []string {
	var names []string
	fs.VisitAll(func(f *flag.Flag) {
		if len(f.Name) == 1 {
			names = append(names, "-"+f.Name)
		} else {
			names = append(names, "--"+f.Name)
		}
	})
	return names
}

// LoadOrchestrator builds the orchestrator configuration from args (without
// the program name) and the environment. getenv nil means os.Getenv. Options
// are filled even when an error is returned, so --version and -h still work;
// with --version nothing else is read.
func LoadOrchestrator(args []string, getenv func(string) string) (*Orchestrator, Options, error) {
	c := DefaultOrchestrator()
	var opts Options
	fs := orchestratorFlagSet(&opts)
	l, set, getenv, err := layer(c, &c.Log, fs, &opts, args, getenv, orchestratorEnv, orchestratorFlagKeys)
	if l == nil {
		return c, opts, err
	}
	if set["host"] || set["port"] {
		l.hostPort(c, fs, set)
	}
	if set["ssl"] {
		if on, err := parseBool(fs.Lookup("ssl").Value.String()); err != nil {
			l.errAt("--ssl", "", "%v", err)
		} else if on && !c.TLS.Enabled() {
			l.errAt("--ssl", "", "needs --ssl-cert and --ssl-key (or tls.cert_file and tls.key_file)")
		}
	}
	l.secret("database.url", "database.url_file", "", "database-url", getenv, false)
	l.secret("artifacts.s3_secret_key", "artifacts.s3_secret_key_file", "", "artifacts-s3-secret-key", getenv, false)
	l.secret("auth.ldap.bind_password", "auth.ldap.bind_password_file", "", "ldap-bind-password", getenv, false)
	l.oidcSecret(c, getenv)
	c.validate(l)
	c.origins = l.origins()
	return c, opts, asErrors(l.errs)
}

// hostPort replaces server.listen with one address built from --host/--port,
// taking the missing half from the first configured entry.
func (l *loader) hostPort(c *Orchestrator, fs *flag.FlagSet, set map[string]bool) {
	host, port := "127.0.0.1", "8001"
	if len(c.Server.Listen) > 0 {
		if h, p, err := net.SplitHostPort(c.Server.Listen[0]); err == nil {
			host, port = h, p
		}
	}
	where := "--host"
	if set["host"] {
		host = fs.Lookup("host").Value.String()
	}
	if set["port"] {
		where = "--port"
		port = fs.Lookup("port").Value.String()
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			l.errAt("--port", "server.listen", "invalid port %q (want 1-65535)", port)
			return
		}
	}
	c.Server.Listen = []string{net.JoinHostPort(host, port)}
	l.src["server.listen"] = origin{where, layerFlag}
}

// LoadWorker builds the worker configuration like LoadOrchestrator does. It
// does not insist on an orchestrator URL or token (--check-config and
// --detect-gpus work without them); call Require before connecting.
func LoadWorker(args []string, getenv func(string) string) (*Worker, Options, error) {
	c := DefaultWorker()
	var opts Options
	fs := workerFlagSet(&opts)
	l, _, getenv, err := layer(c, &c.Log, fs, &opts, args, getenv, workerEnv, workerFlagKeys)
	if l == nil {
		return c, opts, err
	}
	l.secret("orchestrator.token", "orchestrator.token_file", DefaultWorkerTokenFile, "worker-token", getenv, true)
	c.tokenInFiles = c.Orchestrator.Token != "" && l.src["orchestrator.token"].layer == layerFile
	l.credentialFiles(getenv, []string{"orchestrator.cert_file", "orchestrator.key_file"}, []string{"worker-cert", "worker-key"})
	c.validate(l)
	c.origins = l.origins()
	c.fileUnread = l.fileUnread
	return c, opts, asErrors(l.errs)
}

// layer applies what both daemons share, in precedence order: flags are
// parsed, then the file, the environment and the flag values are laid over the
// defaults in cfg, and --verbose raises the log level. A nil loader means stop
// here (a flag error, or --version) and return err.
func layer(cfg any, logc *LogConfig, fs *flag.FlagSet, opts *Options, args []string, getenv func(string) string,
	env, flagKeys []binding) (*loader, map[string]bool, func(string) string, error) {
	set, err := parseFlags(fs, args)
	opts.Args = fs.Args()
	if err != nil || opts.Version {
		return nil, set, getenv, err
	}
	getenv = orOSGetenv(getenv)
	l := newLoader(cfg)
	l.loadFile(opts.ConfigPath, set["config"])
	l.applyEnv(env, getenv)
	l.applyFlags(fs, set, flagKeys)
	if opts.Verbose {
		logc.Level = "debug"
		l.src["log.level"] = origin{"--verbose", layerFlag}
	}
	return l, set, getenv, nil
}

// origins lists where each key that is not a default was set.
func (l *loader) origins() map[string]string {
	out := make(map[string]string, len(l.src))
	for k, o := range l.src {
		if o.layer > layerDefault {
			out[k] = o.where
		}
	}
	return out
}

func orOSGetenv(getenv func(string) string) func(string) string {
	if getenv == nil {
		return os.Getenv
	}
	return getenv
}

// loadFile reads and decodes the TOML file. Only a missing default file is
// fine; a file named with --config must exist.
func (l *loader) loadFile(path string, explicit bool) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) && !explicit {
		return
	}
	if err != nil {
		l.fileUnread = true
		l.errAt(path, "", "cannot read config file: %v", pathErr(err))
		return
	}
	l.decodeTOML(path, data)
}

func (l *loader) applyEnv(bs []binding, getenv func(string) string) {
	for _, b := range bs {
		if v := getenv(b.name); v != "" { // unset and empty are the same
			l.setText(b.key, v, origin{b.name, layerEnv})
		}
	}
}

func (l *loader) applyFlags(fs *flag.FlagSet, set map[string]bool, bs []binding) {
	for _, b := range bs {
		if set[b.name] {
			l.setText(b.key, fs.Lookup(b.name).Value.String(), origin{"--" + b.name, layerFlag})
		}
	}
}

func (l *loader) setText(key, v string, o origin) {
	if err := setText(l.fields[key], v); err != nil {
		l.errAt(o.where, key, "%v", err)
		return
	}
	l.src[key] = o
}

// secret resolves a secret key: a value from env or flags wins; else the
// *_file key; else a value in the file; else the *_file key's default path
// (defFile, "" none), when it holds the secret; else the systemd credential
// $CREDENTIALS_DIRECTORY/<cred>. The default file comes before the
// credential: systemd copies a credential when the unit starts and never
// again, so a secret rewritten in place (a rotated worker token) is seen only
// in the file. With private, a file others may read is refused.
func (l *loader) secret(key, fileKey, defFile, cred string, getenv func(string) string, private bool) {
	f := l.fields[key]
	path := l.fields[fileKey].String()
	fileSet := path != "" && path != defFile
	direct := f.String() != ""
	switch {
	case direct && l.src[key].layer > layerFile:
		return
	case fileSet && direct:
		l.errf(fileKey, "set either %s or %s, not both", key, fileKey)
		return
	case fileSet:
		s, err := readSecret(path, private)
		if err != nil {
			l.errf(fileKey, "cannot read %s: %v", path, err)
			return
		}
		f.SetString(s)
		l.src[key] = l.src[fileKey]
		return
	case direct:
		return
	}
	if path != "" { // the default path: optional
		s, err := readSecret(path, private)
		switch {
		case err == nil:
			f.SetString(s)
			l.src[key] = origin{path, layerFile}
			return
		case !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, errEmptySecret):
			l.errAt(path, key, "cannot read %s (the default of %s): %v", path, fileKey, err)
			return
		}
	}
	if getenv("CREDENTIALS_DIRECTORY") == "" {
		return
	}
	p := filepath.Join(getenv("CREDENTIALS_DIRECTORY"), cred)
	s, err := readSecret(p, false)
	// The package ships an empty credential file so that LoadCredential=
	// does not stop the unit; empty means "not configured yet".
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, errEmptySecret) {
		return
	}
	if err != nil {
		l.errAt(p, key, "cannot read systemd credential %q: %v", cred, err)
		return
	}
	f.SetString(s)
	l.src[key] = origin{p, layerFile}
}

// credentialFiles points keys that name files (a client certificate and its
// key) at systemd credentials, when none of the keys is set and the
// credentials are there. Empty credential files count as absent, as the
// package may ship empty ones for LoadCredential=; one present without the
// other is an error.
func (l *loader) credentialFiles(getenv func(string) string, keys, creds []string) {
	dir := getenv("CREDENTIALS_DIRECTORY")
	if dir == "" {
		return
	}
	for _, k := range keys {
		if l.fields[k].String() != "" {
			return
		}
	}
	var found, missing []string
	for _, c := range creds {
		if fi, err := os.Stat(filepath.Join(dir, c)); err == nil && fi.Mode().IsRegular() && fi.Size() > 0 {
			found = append(found, c)
		} else {
			missing = append(missing, c)
		}
	}
	switch {
	case len(found) == 0:
		return
	case len(missing) > 0:
		l.errAt(filepath.Join(dir, missing[0]), keys[0], "the systemd credential %q is there but %q is not (or is empty); give both or neither",
			found[0], missing[0])
		return
	}
	for i, k := range keys {
		p := filepath.Join(dir, creds[i])
		l.fields[k].SetString(p)
		l.src[k] = origin{p, layerFile}
	}
}

var errEmptySecret = errors.New("file is empty")

// readSecret reads a one-line secret file, dropping the trailing newline.
// With private, a file that its group or others may read is refused: the
// secret has leaked to them already, and quietly using it would hide that.
func readSecret(path string, private bool) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", pathErr(err)
	}
	s := strings.TrimRight(string(b), "\r\n")
	if s == "" {
		return "", errEmptySecret
	}
	if private {
		fi, err := os.Stat(path)
		if err != nil {
			return "", pathErr(err)
		}
		if perm := fi.Mode().Perm(); perm&0o077 != 0 {
			return "", fmt.Errorf("its mode %04o lets others read the token; refusing to use it: run chmod 600 %s "+
				"(and rotate the token if anyone may have read it)", perm, path)
		}
	}
	return s, nil
}

// pathErr drops the path from an *fs.PathError; our messages name it already.
func pathErr(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		if errors.Is(pe.Err, fs.ErrNotExist) {
			return fs.ErrNotExist
		}
		return pe.Err
	}
	return err
}

// Redacted is the effective configuration as TOML, secrets shown as
// "<redacted>" and of each webhook URL only its origin (a receiver's path
// may hold a token: Slack's does).
func (c *Orchestrator) Redacted() string {
	shown := *c
	shown.Webhooks = make([]WebhookConfig, len(c.Webhooks))
	for i, w := range c.Webhooks {
		w.URL = w.redactedURL()
		shown.Webhooks[i] = w
	}
	return encode(&shown)
}

// Redacted is the effective configuration as TOML, secrets shown as "<redacted>".
func (c *Worker) Redacted() string { return encode(c) }

func encode(v any) string {
	var b bytes.Buffer
	enc := toml.NewEncoder(&b)
	enc.Indent = ""
	if err := enc.Encode(v); err != nil {
		return "# cannot encode configuration: " + err.Error() + "\n"
	}
	return b.String()
}

// OrchestratorKeys lists every orchestratord.toml key, dotted ("server.listen").
func OrchestratorKeys() []string { return keysOf(DefaultOrchestrator()) }

// WorkerKeys lists every workerd.toml key, dotted ("worker.name").
func WorkerKeys() []string { return keysOf(DefaultWorker()) }

// OrchestratorEnv lists the environment variables the orchestrator reads.
func OrchestratorEnv() []string { return bindingNames(orchestratorEnv) }

// WorkerEnv lists the environment variables the worker reads.
func WorkerEnv() []string { return bindingNames(workerEnv) }

// OrchestratorFlags lists the orchestrator's flags ("--host", "-v").
func OrchestratorFlags() []string { return flagNames(orchestratorFlagSet(&Options{})) }

// WorkerFlags lists the worker's flags ("--name", "-v").
func WorkerFlags() []string { return flagNames(workerFlagSet(&Options{})) }

func bindingNames(bs []binding) []string {
	names := make([]string, len(bs))
	for i, b := range bs {
		names[i] = b.name
	}
	return names
}
