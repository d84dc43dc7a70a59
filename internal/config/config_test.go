package config

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/auth"
)

// setup writes files into a fresh temp dir; "config.toml" is the usual one.
func setup(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func env(kv ...string) func(string) string {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return func(k string) string { return m[k] }
}

func loadO(t *testing.T, toml string, getenv func(string) string, args ...string) (*Orchestrator, Options, error) {
	t.Helper()
	path := filepath.Join(setup(t, map[string]string{"o.toml": toml}), "o.toml")
	return LoadOrchestrator(append([]string{"--config", path}, args...), getenv)
}

func loadW(t *testing.T, toml string, getenv func(string) string, args ...string) (*Worker, Options, error) {
	t.Helper()
	path := filepath.Join(setup(t, map[string]string{"w.toml": toml}), "w.toml")
	return LoadWorker(append([]string{"--config", path}, args...), getenv)
}

func errList(err error) []string {
	var es Errors
	if !errors.As(err, &es) {
		if err == nil {
			return nil
		}
		return []string{err.Error()}
	}
	out := make([]string, len(es))
	for i, e := range es {
		out[i] = e.Error()
	}
	return out
}

func TestDefaultsLoad(t *testing.T) {
	t.Parallel()
	o, opts, err := loadO(t, "", env())
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(values(o), DefaultOrchestrator()) {
		t.Errorf("empty file changed defaults:\n%s", o.Redacted())
	}
	if opts.CheckConfig || opts.Verbose || opts.Version || len(opts.Args) != 0 {
		t.Errorf("unexpected options %+v", opts)
	}
	w, _, err := loadW(t, "", env())
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(valuesW(w), DefaultWorker()) {
		t.Errorf("empty file changed defaults:\n%s", w.Redacted())
	}
	if err := DefaultOrchestrator().Validate(); err != nil {
		t.Error(err)
	}
	if err := DefaultWorker().Validate(); err != nil {
		t.Error(err)
	}
}

func TestMissingFile(t *testing.T) {
	t.Parallel()
	missing := filepath.Join(t.TempDir(), "nope.toml")

	l := newLoader(DefaultOrchestrator())
	l.loadFile(missing, false) // a missing default file is fine
	if len(l.errs) != 0 {
		t.Errorf("missing default file: %v", l.errs)
	}
	_, _, err := LoadOrchestrator([]string{"--config", missing}, env())
	if err == nil || !strings.Contains(err.Error(), missing) {
		t.Errorf("missing explicit file: got %v", err)
	}
}

func TestPrecedence(t *testing.T) {
	t.Parallel()
	file := `
[server]
listen = ["10.0.0.1:9000"]
[log]
level = "warn"
[workers]
heartbeat_timeout = "200s"
`
	tests := []struct {
		name    string
		env     func(string) string
		args    []string
		listen  []string
		level   string
		timeout time.Duration
	}{
		{"file", env(), nil, []string{"10.0.0.1:9000"}, "warn", 200 * time.Second},
		{"env over file", env("SIMPLETUNER_LISTEN", "1.2.3.4:1, [::1]:2", "SIMPLETUNER_LOG_LEVEL", "error", "SIMPLETUNER_HEARTBEAT_TIMEOUT", "180"),
			nil, []string{"1.2.3.4:1", "[::1]:2"}, "error", 180 * time.Second},
		{"env duration string", env("SIMPLETUNER_HEARTBEAT_TIMEOUT", "5m"), nil, []string{"10.0.0.1:9000"}, "warn", 5 * time.Minute},
		{"flag over env", env("SIMPLETUNER_LISTEN", "1.2.3.4:1", "SIMPLETUNER_LOG_LEVEL", "error"),
			[]string{"--host", "127.0.0.1", "-v"}, []string{"127.0.0.1:1"}, "debug", 200 * time.Second},
		{"--port keeps host", env(), []string{"--port", "8443"}, []string{"10.0.0.1:8443"}, "warn", 200 * time.Second},
		{"--host keeps port", env(), []string{"--host=::1"}, []string{"[::1]:9000"}, "warn", 200 * time.Second},
		{"--host and --port", env(), []string{"--host", "h", "--port", "1"}, []string{"h:1"}, "warn", 200 * time.Second},
		{"--verbose", env(), []string{"--verbose"}, []string{"10.0.0.1:9000"}, "debug", 200 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c, _, err := loadO(t, file, tt.env, tt.args...)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(c.Server.Listen, tt.listen) || c.Log.Level != tt.level || c.Workers.HeartbeatTimeout.Duration != tt.timeout {
				t.Errorf("got listen %q level %q timeout %v", c.Server.Listen, c.Log.Level, c.Workers.HeartbeatTimeout)
			}
		})
	}
}

func TestHostWithoutListen(t *testing.T) {
	t.Parallel()
	c, _, err := loadO(t, "[server]\nlisten = []\n", env(), "--host", "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(c.Server.Listen, []string{"127.0.0.1:8001"}) {
		t.Errorf("listen = %q", c.Server.Listen)
	}
}

func TestWorkerPrecedence(t *testing.T) {
	t.Parallel()
	file := `
[orchestrator]
url = "https://file:8001"
token = "file-token"
[worker]
name = "file"
persistent = true
`
	tests := []struct {
		name       string
		env        func(string) string
		args       []string
		url, token string
		wname      string
		persistent bool
		insecure   bool
	}{
		{"file", env(), nil, "https://file:8001", "file-token", "file", true, false},
		{"env", env("SIMPLETUNER_ORCHESTRATOR_URL", "http://env", "SIMPLETUNER_WORKER_TOKEN", "env-token",
			"SIMPLETUNER_WORKER_NAME", "env", "SIMPLETUNER_WORKER_PERSISTENT", "no", "SIMPLETUNER_SSL_NO_VERIFY", "1"),
			nil, "http://env", "env-token", "env", false, true},
		{"flags", env("SIMPLETUNER_ORCHESTRATOR_URL", "http://env", "SIMPLETUNER_WORKER_PERSISTENT", "no"),
			[]string{"--orchestrator-url", "unix:///run/o.sock", "--worker-token", "flag-token", "--name", "flag", "--persistent", "--ssl-no-verify"},
			"unix:///run/o.sock", "flag-token", "flag", true, true},
		{"--persistent=false", env(), []string{"--persistent=false"}, "https://file:8001", "file-token", "file", false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c, _, err := loadW(t, file, tt.env, tt.args...)
			if err != nil {
				t.Fatal(err)
			}
			o := c.Orchestrator
			if o.URL != tt.url || o.Token.Value() != tt.token || c.Worker.Name != tt.wname ||
				c.Worker.Persistent != tt.persistent || o.InsecureSkipVerify != tt.insecure {
				t.Errorf("got %+v persistent=%v name=%q token=%q", o, c.Worker.Persistent, c.Worker.Name, o.Token.Value())
			}
		})
	}
}

func TestOptions(t *testing.T) {
	t.Parallel()
	_, opts, err := loadO(t, "", env(), "--check-config", "token", "create", "--name", "n", "--scope", "s")
	if err != nil {
		t.Fatal(err)
	}
	if !opts.CheckConfig || !slices.Equal(opts.Args, []string{"token", "create", "--name", "n", "--scope", "s"}) {
		t.Errorf("opts = %+v", opts)
	}
	_, opts, err = loadW(t, "", env(), "--detect-gpus")
	if err != nil || !opts.DetectGPUs {
		t.Errorf("--detect-gpus: %+v %v", opts, err)
	}
	// --version must work whatever state the config is in.
	_, opts, err = LoadOrchestrator([]string{"--config", "/nonexistent/x.toml", "--version"}, env())
	if err != nil || !opts.Version {
		t.Errorf("--version: %+v %v", opts, err)
	}
	_, _, err = LoadWorker([]string{"-h"}, env())
	if !errors.Is(err, flag.ErrHelp) {
		t.Errorf("-h: %v", err)
	}
}

// A flag that cannot be parsed is a usage error naming it as the
// documentation writes it; --help lists the flags that way too.
func TestFlagUsage(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--bogus"}, "flag provided but not defined: --bogus"},
		{[]string{"-bogus"}, "flag provided but not defined: --bogus"},
		{[]string{"--config"}, "flag needs an argument: --config"},
		{[]string{"-v=maybe"}, `invalid boolean value "maybe" for -v`},
	} {
		_, _, err := LoadOrchestrator(c.args, func(string) string { return "" })
		var ue *UsageError
		if !errors.As(err, &ue) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v; want a usage error %q", c.args, err, c.want)
		}
	}
	for name, help := range map[string]string{"orchestratord": OrchestratorFlagHelp(), "workerd": WorkerFlagHelp()} {
		for _, want := range []string{"  --config file ", "  --check-config ", "  -v, --verbose ", "  --version "} {
			if !strings.Contains(help, want) {
				t.Errorf("%s's flag help lacks %q:\n%s", name, want, help)
			}
		}
		if strings.Contains(help, "\n  -config") || strings.Contains(help, "  -verbose") {
			t.Errorf("%s's flag help shows a single-dash long flag:\n%s", name, help)
		}
	}
	if help := WorkerFlagHelp(); !strings.Contains(help, "  --orchestrator-url URL ") || !strings.Contains(help, "  --persistent ") {
		t.Errorf("workerd's flag help:\n%s", help)
	}
}

func TestErrors(t *testing.T) {
	t.Parallel()
	dir := setup(t, map[string]string{"cert.pem": "x"})
	cert := filepath.Join(dir, "cert.pem")
	tests := []struct {
		name string
		toml string
		env  func(string) string
		args []string
		want []string // substrings, one per expected error, in order
	}{
		{"syntax", "[server]\nlisten = = 1\n", nil, nil, []string{"o.toml:2: key server.listen: expected value"}},
		{"unknown key", "[server]\nlisten = []\nbogus = 1\n", nil, nil, []string{"o.toml:3: key server.bogus: unknown key"}},
		{"unknown table", "\n[bogus]\nx = 1\n", nil, nil, []string{"o.toml:2: key bogus: unknown key"}},
		{"unknown top-level key", "x = 1\n", nil, nil, []string{"o.toml:1: key x: unknown key"}},
		{"dotted unknown", "server.nope = 1\n", nil, nil, []string{"o.toml:1: key server.nope: unknown key"}},
		{"table as value", "server = 5\n", nil, nil, []string{"o.toml:1: key server: must be a table"}},
		{"array of tables", "[[server]]\nlisten = []\n", nil, nil, []string{"o.toml:1: key server: must be a table"}},
		{"type string", "[server]\nlisten = \"0.0.0.0:1\"\n", nil, nil, []string{"o.toml:2: key server.listen: want an array of strings, got a string"}},
		{"type element", "[server]\nlisten = [\"a:1\", 2]\n", nil, nil, []string{"o.toml:2: key server.listen: want an array of strings, element 1 is an integer"}},
		{"type int", "[jobs]\nmax_retries = \"3\"\n", nil, nil, []string{"o.toml:2: key jobs.max_retries: want an integer, got a string"}},
		{"type duration", "[jobs]\ncancel_grace = 30\n", nil, nil, []string{"o.toml:2: key jobs.cancel_grace: want a duration string"}},
		{"bad duration", "[jobs]\ncancel_grace = \"30\"\n", nil, nil, []string{"o.toml:2: key jobs.cancel_grace: invalid duration"}},
		{"negative duration", "[jobs]\ncancel_grace = \"-1s\"\n", nil, nil, []string{"o.toml:2: key jobs.cancel_grace: duration \"-1s\" is negative"}},
		{"zero duration", "[workers]\nack_timeout = \"0s\"\n", nil, nil, []string{"o.toml:2: key workers.ack_timeout: must be greater than 0"}},
		{"timeout <= interval", "[workers]\nheartbeat_interval = \"3m\"\n", nil, nil, []string{"o.toml:2: key workers.heartbeat_interval: heartbeat_timeout (2m) must be longer than heartbeat_interval (3m)"}},
		{"negative retries", "[jobs]\nmax_retries = -1\n", nil, nil, []string{"o.toml:2: key jobs.max_retries: must be 0 or more"}},
		{"zero limit", "[jobs]\nlog_limit_bytes = 0\n", nil, nil, []string{"o.toml:2: key jobs.log_limit_bytes: must be greater than 0"}},
		{"body limit", "[server]\nmax_body_bytes = -5\n", nil, nil, []string{"key server.max_body_bytes: must be greater than 0"}},
		{"s3 endpoint secret", "[artifacts]\nbackend = \"s3\"\ns3_bucket = \"bkt\"\ns3_endpoint = \"https://minio:hunter2@s3.example:9000\"\n", nil, nil,
			[]string{"o.toml:4: key artifacts.s3_endpoint: \"https://REDACTED@s3.example:9000\" holds a user or password"}},
		{"public url path", "[server]\npublic_url = \"https://o.example/ui\"\n", nil, nil, []string{"o.toml:2: key server.public_url: \"https://o.example/ui\": must be an origin"}},
		{"public url scheme", "[server]\npublic_url = \"o.example\"\n", nil, nil, []string{"key server.public_url: \"o.example\": want an http:// or https:// URL"}},
		{"public url user", "[server]\npublic_url = \"https://u:p@o.example\"\n", nil, nil, []string{"must not hold a user or password"}},
		{"log level", "[log]\nlevel = \"loud\"\nformat = \"xml\"\n", nil, nil, []string{"o.toml:2: key log.level: \"loud\" is not one of", "o.toml:3: key log.format: \"xml\" is not one of"}},
		{"listen", "[server]\nlisten = [\"nohost\"]\n", nil, nil, []string{"o.toml:2: key server.listen: \"nohost\": want host:port"}},
		{"listen port", "[server]\nlisten = [\"h:http\"]\n", nil, nil, []string{"key server.listen: \"h:http\": port must be a number"}},
		{"metrics", "[metrics]\nlisten = \"9101\"\n", nil, nil, []string{"o.toml:2: key metrics.listen"}},
		{"admin socket relative", "[server]\nadmin_socket = \"x.sock\"\n", nil, nil, []string{"key server.admin_socket: \"x.sock\" must be an absolute path"}},
		{"db scheme", "[database]\nurl = \"mysql://u:hunter2@h/db\"\n", nil, nil, []string{"o.toml:2: key database.url: want \"\""}},
		{"db no scheme", "[database]\nurl = \"hunter2\"\n", nil, nil, []string{"key database.url: want"}},
		{"tls half", fmt.Sprintf("[tls]\ncert_file = %q\n", cert), nil, nil, []string{"o.toml:2: key tls.cert_file: tls.cert_file and tls.key_file must be set together"}},
		{"tls missing files", "[tls]\ncert_file = \"/nonexistent/c\"\nkey_file = \"/nonexistent/k\"\n", nil, nil,
			[]string{"o.toml:2: key tls.cert_file: cannot read /nonexistent/c: file does not exist", "o.toml:3: key tls.key_file: cannot read /nonexistent/k"}},
		{"client ca alone", fmt.Sprintf("[tls]\nclient_ca_file = %q\n", cert), nil, nil, []string{"key tls.client_ca_file: needs tls.cert_file"}},
		{"empty dir", "[paths]\nstate_dir = \"\"\n", nil, nil, []string{"o.toml:2: key paths.state_dir: must not be empty"}},
		{"auth", "[auth]\nfailures_per_minute = 0\n", nil, nil, []string{"o.toml:2: key auth.failures_per_minute"}},
		{"auth visibility", "[auth]\nvisibility = \"teams\"\n", nil, nil, []string{"o.toml:2: key auth.visibility: must be \"team\", \"all\" or \"\""}},
		{"env duration", "", env("SIMPLETUNER_HEARTBEAT_TIMEOUT", "soon"), nil, []string{"SIMPLETUNER_HEARTBEAT_TIMEOUT: key workers.heartbeat_timeout: invalid duration"}},
		{"env value", "", env("SIMPLETUNER_LOG_LEVEL", "chatty"), nil, []string{"SIMPLETUNER_LOG_LEVEL: key log.level: \"chatty\""}},
		{"env listen", "", env("SIMPLETUNER_LISTEN", "a:1,b"), nil, []string{"SIMPLETUNER_LISTEN: key server.listen: \"b\""}},
		{"env db", "", env("SIMPLETUNER_DATABASE_URL", "mysql://x"), nil, []string{"SIMPLETUNER_DATABASE_URL: key database.url"}},
		{"flag port", "", nil, []string{"--port", "http"}, []string{"--port: key server.listen: invalid port \"http\""}},
		{"flag port range", "", nil, []string{"--port", "70000"}, []string{"--port: key server.listen: invalid port"}},
		{"--ssl alone", "", nil, []string{"--ssl"}, []string{"--ssl: needs --ssl-cert and --ssl-key"}},
		{"--ssl-cert only", "", nil, []string{"--ssl", "--ssl-cert", cert}, []string{"--ssl: needs", "--ssl-cert: key tls.cert_file: tls.cert_file and tls.key_file must be set together"}},
		{"unknown flag", "", nil, []string{"--nope"}, []string{"flag provided but not defined: --nope"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			getenv := tt.env
			if getenv == nil {
				getenv = env()
			}
			_, _, err := loadO(t, tt.toml, getenv, tt.args...)
			got := errList(err)
			if len(got) != len(tt.want) {
				t.Fatalf("got %d errors, want %d:\n%s", len(got), len(tt.want), strings.Join(got, "\n"))
			}
			for i, w := range tt.want {
				if !strings.Contains(got[i], w) {
					t.Errorf("error %d = %q, want it to contain %q", i, got[i], w)
				}
				if strings.Contains(got[i], "hunter2") {
					t.Errorf("error %d leaks the database URL: %q", i, got[i])
				}
			}
		})
	}
}

func TestWorkerErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		toml string
		env  func(string) string
		args []string
		want []string
	}{
		{"no scheme", "[orchestrator]\nurl = \"localhost:8001\"\n", nil, nil, []string{"w.toml:2: key orchestrator.url: \"localhost:8001\": missing scheme"}},
		{"bad scheme", "[orchestrator]\nurl = \"ftp://h\"\n", nil, nil, []string{"key orchestrator.url: \"ftp://h\": unsupported scheme \"ftp\""}},
		{"no host", "[orchestrator]\nurl = \"https://\"\n", nil, nil, []string{"missing host"}},
		{"unix no path", "[orchestrator]\nurl = \"unix://\"\n", nil, nil, []string{"missing socket path"}},
		{"url list ok", "[orchestrator]\nurl = \"https://a:8001, https://b:8001\"\n", nil, nil, nil},
		{"url list bad entry", "[orchestrator]\nurl = \"https://a:8001,b:8001\"\n", nil, nil, []string{"w.toml:2: key orchestrator.url: \"b:8001\": missing scheme"}},
		{"url list empty entry", "[orchestrator]\nurl = \"https://a:8001,,https://b\"\n", nil, nil, []string{"w.toml:2: key orchestrator.url: \"https://a:8001,,https://b\" has an empty entry"}},
		{"url list with unix", "[orchestrator]\nurl = \"unix:///run/o.sock,https://b\"\n", nil, nil, []string{"w.toml:2: key orchestrator.url: a unix:// socket cannot be one of several URLs"}},
		{"gpu", "[gpu]\nbackend = \"rocm\"\n", nil, nil, []string{"w.toml:2: key gpu.backend: \"rocm\" is not one of nvml, static, none"}},
		{"gpu vendor", "[gpu]\nvendor = \"intel\"\n", nil, nil, []string{"w.toml:2: key gpu.vendor: \"intel\" is not one of nvidia, amd"}},
		{"static without devices", "[gpu]\nbackend = \"static\"\n", nil, nil, []string{"w.toml:2: key gpu.devices: backend \"static\" needs at least one"}},
		{"devices without static", "[gpu]\nbackend = \"nvml\"\n[[gpu.devices]]\nname = \"A\"\nmemory_gb = 8\n", nil, nil, []string{"w.toml:3: key gpu.devices: only with backend = \"static\""}},
		{"static devices", "[gpu]\nbackend = \"static\"\n[[gpu.devices]]\nname = \"MI300X\"\nmemory_gb = 192\nuuid = \"u1\"\n[[gpu.devices]]\nname = \"\"\nmemory_gb = 0\nuuid = \"u1\"\ndevice_node = \"dev/x\"\n", nil, nil,
			[]string{"w.toml:7: key gpu.devices: entry 2: name is missing", "entry 2: memory_gb must be positive", "entry 2: uuid \"u1\" is also entry 1's", "entry 2: device_node \"dev/x\" must be an absolute path"}},
		{"static device uuid", "[gpu]\nbackend = \"static\"\n[[gpu.devices]]\nname = \"A\"\nmemory_gb = 8\nuuid = \"" + strings.Repeat("u", 129) + "\"\n[[gpu.devices]]\nname = \"B\"\nmemory_gb = 8\nuuid = \"u\\u001b\"\n", nil, nil,
			[]string{"w.toml:3: key gpu.devices: entry 1: uuid is 129 characters long; the orchestrator takes at most 128", "entry 2: uuid has the control character U+001B"}},
		{"static device types", "[gpu]\nbackend = \"static\"\n[[gpu.devices]]\nname = \"A\"\nmemory_gb = 8\n[[gpu.devices]]\nname = \"B\"\nmemory = 8\nmemory_gb = \"8\"\n", nil, nil,
			[]string{"w.toml:6: key gpu.devices: entry 2: unknown key \"memory\" (known: device_node, memory_gb, name, uuid); memory_gb: want a number, got a string"}},
		{"gpu devices not tables", "[gpu]\nbackend = \"static\"\ndevices = [\"a\"]\n", nil, nil, []string{"key gpu.devices: want an array of tables"}},
		{"max jobs zero", "[worker]\nmax_jobs = 0\n", nil, nil, []string{"w.toml:2: key worker.max_jobs: must be at least 1"}},
		{"max jobs negative", "[worker]\nmax_jobs = -2\n", nil, nil, []string{"w.toml:2: key worker.max_jobs: must be at least 1"}},
		{"command", "[job]\ncommand = []\n", nil, nil, []string{"w.toml:2: key job.command: must name a program"}},
		{"env names", "[job]\nenv = { \"A=B\" = \"x\", OK = \"y\" }\n", nil, nil, []string{"w.toml:2: key job.env: \"A=B\" is not a valid"}},
		{"env values", "[job]\nenv = { A = 1 }\n", nil, nil, []string{"w.toml:2: key job.env: want a table of strings, \"A\" is an integer"}},
		{"pass_env ok", "[job]\npass_env = [\"HF_*\", \"VIRTUAL_ENV\", \"LC_[A-Z]*\"]\n", nil, nil, nil},
		{"pass_env secret", "[job]\npass_env = [\"HF_HOME\", \"SIMPLETUNER_ADMIN_TOKEN\", \"db_password\"]\n", nil, nil, []string{
			"w.toml:2: key job.pass_env: \"SIMPLETUNER_ADMIN_TOKEN\" looks like a secret's name; workerd never passes one of its own environment to jobs",
			"w.toml:2: key job.pass_env: \"db_password\" looks like a secret's name"}},
		{"pass_env pattern", "[job]\npass_env = [\"A=B\", \"[\", \"\"]\n", nil, nil, []string{
			"w.toml:2: key job.pass_env: \"A=B\" is not a variable name or a glob pattern", "\"[\" is not", "\"\" is not"}},
		{"labels type", "[worker]\nlabels = [\"a\"]\n", nil, nil, []string{"w.toml:2: key worker.labels: want a table of strings"}},
		{"name escapes", "[worker]\nname = \"w\\u001b[2J\"\n", nil, nil, []string{"w.toml:2: key worker.name: \"w\\x1b[2J\" has the control character U+001B"}},
		{"labels table ok", "[worker.labels]\ngpu = \"a100\"\n[worker]\nname = \"n\"\n", nil, nil, nil},
		{"self fence", "[worker]\nself_fence_after = \"0s\"\n", nil, nil, []string{"w.toml:2: key worker.self_fence_after: must be greater than 0"}},
		{"bool type", "[worker]\npersistent = \"yes\"\n", nil, nil, []string{"w.toml:2: key worker.persistent: want true or false"}},
		{"ca file", "[orchestrator]\nca_file = \"/nonexistent/ca\"\n", nil, nil, []string{"w.toml:2: key orchestrator.ca_file: cannot read /nonexistent/ca"}},
		{"env bool", "", env("SIMPLETUNER_WORKER_PERSISTENT", "maybe"), nil, []string{"SIMPLETUNER_WORKER_PERSISTENT: key worker.persistent: invalid boolean \"maybe\""}},
		{"env url", "", env("SIMPLETUNER_ORCHESTRATOR_URL", "orch:8001"), nil, []string{"SIMPLETUNER_ORCHESTRATOR_URL: key orchestrator.url"}},
		{"flag url", "", nil, []string{"--orchestrator-url", "orch"}, []string{"--orchestrator-url: key orchestrator.url: \"orch\": missing scheme"}},
		{"flag bool", "", nil, []string{"--persistent=maybe"}, []string{"--persistent: key worker.persistent: invalid boolean"}},
		{"token both", "[orchestrator]\ntoken = \"a\"\ntoken_file = \"/x\"\n", nil, nil, []string{"w.toml:3: key orchestrator.token_file: set either orchestrator.token or orchestrator.token_file, not both"}},
		{"token file missing", "[orchestrator]\ntoken_file = \"/nonexistent/t\"\n", nil, nil, []string{"w.toml:2: key orchestrator.token_file: cannot read /nonexistent/t: file does not exist"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			getenv := tt.env
			if getenv == nil {
				getenv = env()
			}
			_, _, err := loadW(t, tt.toml, getenv, tt.args...)
			got := errList(err)
			if len(got) != len(tt.want) {
				t.Fatalf("got %d errors, want %d:\n%s", len(got), len(tt.want), strings.Join(got, "\n"))
			}
			for i, w := range tt.want {
				if !strings.Contains(got[i], w) {
					t.Errorf("error %d = %q, want it to contain %q", i, got[i], w)
				}
			}
		})
	}
}

func TestThreeMistakesThreeErrors(t *testing.T) {
	t.Parallel()
	file := `# comment
[server]
listen = "0.0.0.0:8001"   # line 3: not an array

[jobs]
max_retries = 3
cancel_grace = "soon"     # line 7: bad duration

[log]
level = "info"
colour = true             # line 11: unknown
`
	_, _, err := loadO(t, file, env())
	got := errList(err)
	want := []string{"o.toml:3: key server.listen:", "o.toml:7: key jobs.cancel_grace:", "o.toml:11: key log.colour: unknown key"}
	if len(got) != 3 {
		t.Fatalf("got %d errors, want 3:\n%s", len(got), strings.Join(got, "\n"))
	}
	for i := range want {
		if !strings.Contains(got[i], want[i]) {
			t.Errorf("error %d = %q, want %q", i, got[i], want[i])
		}
	}
	if n := strings.Count(err.Error(), "\n"); n != 2 {
		t.Errorf("Error() should list one problem per line:\n%s", err)
	}
}

func TestRequire(t *testing.T) {
	t.Parallel()
	w := DefaultWorker()
	got := errList(w.Require())
	if len(got) != 2 || !strings.Contains(got[0], "orchestrator.url") || !strings.Contains(got[1], "orchestrator.token") {
		t.Errorf("Require() = %q", got)
	}
	w.Orchestrator.URL, w.Orchestrator.Token = "https://o", Secret(auth.NewWorkerToken())
	if err := w.Require(); err != nil {
		t.Error(err)
	}
	// The token's shape is checked before any request.
	for token, says := range map[string]string{
		auth.NewAdminToken():           "this is an admin token",
		auth.NewWorkerToken()[:20]:     "malformed token (checksum)",
		"a-password-pasted-by-mistake": "not a SimpleTuner token",
	} {
		w.Orchestrator.Token = Secret(token)
		got := errList(w.Require())
		if len(got) != 1 || !strings.Contains(got[0], "orchestrator.token") || !strings.Contains(got[0], says) || strings.Contains(got[0], token) {
			t.Errorf("Require() with a bad token = %q, want %q", got, says)
		}
	}
}

func TestSecretSources(t *testing.T) {
	t.Parallel()
	dir := setup(t, map[string]string{
		"token":        "from-file\n",
		"db":           "postgres://u:p@h/db\r\n",
		"worker-token": "from-credential\n",
		"database-url": "sqlite:///cred.db\n",
		"empty":        "\n",
	})
	p := func(name string) string { return filepath.Join(dir, name) }
	creds := env("CREDENTIALS_DIRECTORY", dir)

	tests := []struct {
		name string
		toml string
		env  func(string) string
		args []string
		want string
		err  string
	}{
		{"token_file", fmt.Sprintf("[orchestrator]\ntoken_file = %q\n", p("token")), creds, nil, "from-file", ""},
		{"credential", "", creds, nil, "from-credential", ""},
		{"no credential dir", "", env(), nil, "", ""},
		{"credential absent", "", env("CREDENTIALS_DIRECTORY", t.TempDir()), nil, "", ""},
		{"file token beats credential", "[orchestrator]\ntoken = \"inline\"\n", creds, nil, "inline", ""},
		{"env beats token_file", fmt.Sprintf("[orchestrator]\ntoken_file = %q\n", p("token")), env("SIMPLETUNER_WORKER_TOKEN", "env"), nil, "env", ""},
		{"flag beats all", fmt.Sprintf("[orchestrator]\ntoken_file = %q\n", p("token")), env("SIMPLETUNER_WORKER_TOKEN", "env"), []string{"--worker-token", "flag"}, "flag", ""},
		{"empty file", fmt.Sprintf("[orchestrator]\ntoken_file = %q\n", p("empty")), env(), nil, "", "w.toml:2: key orchestrator.token_file: cannot read " + p("empty") + ": file is empty"},
		{"unreadable credential", "", env("CREDENTIALS_DIRECTORY", p("token")), nil, "", "key orchestrator.token: cannot read systemd credential \"worker-token\""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c, _, err := loadW(t, tt.toml, tt.env, tt.args...)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("err = %v, want %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := c.Orchestrator.Token.Value(); got != tt.want {
				t.Errorf("token = %q, want %q", got, tt.want)
			}
		})
	}

	t.Run("database", func(t *testing.T) {
		t.Parallel()
		c, _, err := loadO(t, fmt.Sprintf("[database]\nurl_file = %q\n", p("db")), creds)
		if err != nil || c.Database.URL.Value() != "postgres://u:p@h/db" {
			t.Errorf("url_file: %q %v", c.Database.URL.Value(), err)
		}
		c, _, err = loadO(t, "", creds)
		if err != nil || c.Database.URL.Value() != "sqlite:///cred.db" {
			t.Errorf("credential: %q %v", c.Database.URL.Value(), err)
		}
		_, _, err = loadO(t, "[database]\nurl_file = \"/nonexistent/db\"\n", env())
		if err == nil || !strings.Contains(err.Error(), "o.toml:2: key database.url_file: cannot read /nonexistent/db") {
			t.Errorf("unreadable url_file: %v", err)
		}
	})
}

func TestRedacted(t *testing.T) {
	t.Parallel()
	o, _, err := loadO(t, "[database]\nurl = \"postgres://admin:hunter2@db/st\"\n", env())
	if err != nil {
		t.Fatal(err)
	}
	out := o.Redacted()
	if strings.Contains(out, "hunter2") || !strings.Contains(out, `url = "<redacted>"`) {
		t.Errorf("orchestrator Redacted():\n%s", out)
	}
	if !strings.Contains(out, `heartbeat_timeout = "2m"`) || !strings.Contains(out, `listen = ["127.0.0.1:8001"]`) {
		t.Errorf("orchestrator Redacted() lacks values:\n%s", out)
	}
	w, _, err := loadW(t, "", env("SIMPLETUNER_WORKER_TOKEN", "s3cret"))
	if err != nil {
		t.Fatal(err)
	}
	if out := w.Redacted(); strings.Contains(out, "s3cret") || !strings.Contains(out, `token = "<redacted>"`) {
		t.Errorf("worker Redacted():\n%s", out)
	}
	if out := DefaultWorker().Redacted(); !strings.Contains(out, `token = ""`) {
		t.Errorf("empty secret should print as empty:\n%s", out)
	}
}

func TestSecretNeverPrints(t *testing.T) {
	t.Parallel()
	s := Secret("hunter2")
	for _, verb := range []string{"%v", "%s", "%q", "%x", "%#v", "%+v", "%d", "%10s"} {
		if got := fmt.Sprintf(verb, s); strings.Contains(got, "hunter2") || !strings.Contains(got, "redacted") {
			t.Errorf("Sprintf(%s) = %q", verb, got)
		}
	}
	if got := fmt.Sprintf("%v", struct{ T Secret }{s}); strings.Contains(got, "hunter2") {
		t.Errorf("in a struct: %q", got)
	}
	if s.Value() != "hunter2" || Secret("").String() != "" {
		t.Error("Value/empty String wrong")
	}
}

func TestDuration(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{"30s": "30s", "120s": "2m", "1h": "1h", "90s": "1m30s", "2m10s": "2m10s", "1h30m": "1h30m", "500ms": "500ms", "0s": "0s"} {
		var d Duration
		if err := d.UnmarshalText([]byte(in)); err != nil {
			t.Fatal(err)
		}
		if b, _ := d.MarshalText(); string(b) != want {
			t.Errorf("%s → %s, want %s", in, b, want)
		}
	}
	var d Duration
	for _, bad := range []string{"-1s", "30", "", "soon"} {
		if err := d.UnmarshalText([]byte(bad)); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestSurfaceLists(t *testing.T) {
	t.Parallel()
	keys := OrchestratorKeys()
	for _, k := range []string{"server.listen", "server.instance_id", "database.url_file", "workers.ping_interval", "jobs.scheduler_interval", "auth.failures_per_minute", "metrics.listen"} {
		if !slices.Contains(keys, k) {
			t.Errorf("OrchestratorKeys lacks %s", k)
		}
	}
	if wk := WorkerKeys(); !slices.Contains(wk, "orchestrator.token_file") || !slices.Contains(wk, "worker.reconnect_max") || !slices.Contains(wk, "gpu.backend") {
		t.Errorf("WorkerKeys = %q", wk)
	}
	if len(OrchestratorEnv()) != 9 || len(WorkerEnv()) != 6 {
		t.Errorf("env lists: %q %q", OrchestratorEnv(), WorkerEnv())
	}
	of := OrchestratorFlags()
	for _, f := range []string{"--config", "--host", "--port", "--ssl", "--ssl-cert", "--ssl-key", "--check-config", "-v", "--verbose", "--version"} {
		if !slices.Contains(of, f) {
			t.Errorf("OrchestratorFlags lacks %s: %q", f, of)
		}
	}
	wf := WorkerFlags()
	for _, f := range []string{"--orchestrator-url", "--worker-token", "--name", "--persistent", "-v", "--verbose", "--ssl-no-verify", "--config", "--check-config", "--version", "--detect-gpus"} {
		if !slices.Contains(wf, f) {
			t.Errorf("WorkerFlags lacks %s: %q", f, wf)
		}
	}
}

// Every env/flag binding must name a real key, or setText would panic.
func TestBindingsNameKeys(t *testing.T) {
	t.Parallel()
	check := func(keys []string, bs ...[]binding) {
		for _, list := range bs {
			for _, b := range list {
				if !slices.Contains(keys, b.key) {
					t.Errorf("%s binds unknown key %s", b.name, b.key)
				}
			}
		}
	}
	check(OrchestratorKeys(), orchestratorEnv, orchestratorFlagKeys)
	check(WorkerKeys(), workerEnv, workerFlagKeys)
}

// values and valuesW drop where each key came from, leaving the values to
// compare with the defaults.
func values(c *Orchestrator) *Orchestrator {
	v := *c
	v.origins = nil
	return &v
}

func valuesW(c *Worker) *Worker {
	v := *c
	v.origins = nil
	return &v
}

// Origin says where a value came from, so a daemon can tell a key an admin
// set from a default.
func TestOrigin(t *testing.T) {
	t.Parallel()
	w, _, err := loadW(t, "[job]\ncancel_grace = \"5s\"\n", env("SIMPLETUNER_WORKER_NAME", "box"))
	if err != nil {
		t.Fatal(err)
	}
	if o := w.Origin("job.cancel_grace"); !strings.HasSuffix(o, ".toml:2") {
		t.Errorf("job.cancel_grace set at %q, want the file's line 2", o)
	}
	if o := w.Origin("worker.name"); o != "SIMPLETUNER_WORKER_NAME" {
		t.Errorf("worker.name set at %q", o)
	}
	if o := w.Origin("worker.persistent"); o != "" {
		t.Errorf("worker.persistent is a default but has origin %q", o)
	}
}

// An unknown key names the nearest known one when it looks like a typo.
func TestUnknownKeySuggestions(t *testing.T) {
	t.Parallel()
	_, _, err := loadO(t, "[workers]\nhearbeat_timeout = \"5s\"\n[jobs]\nheartbeat_interval = \"1s\"\nzzz = 1\n[serverr]\n", env())
	got := errList(err)
	want := []string{
		"key workers.hearbeat_timeout: unknown key (did you mean workers.heartbeat_timeout?)",
		"key jobs.heartbeat_interval: unknown key (did you mean workers.heartbeat_interval?)",
		"key jobs.zzz: unknown key",
		"key serverr: unknown key (did you mean server?)",
	}
	if len(got) != len(want) {
		t.Fatalf("got %q", got)
	}
	for i := range want {
		if !strings.HasSuffix(got[i], want[i]) {
			t.Errorf("error %d = %q, want it to end %q", i, got[i], want[i])
		}
	}
	if strings.Contains(got[2], "did you mean") {
		t.Errorf("a key far from every known one got a suggestion: %q", got[2])
	}
}

func TestEditDistance(t *testing.T) {
	for _, c := range []struct {
		a, b string
		d    int
	}{{"", "", 0}, {"abc", "abc", 0}, {"hearbeat", "heartbeat", 1}, {"lsiten", "listen", 1}, {"abc", "", 3}, {"kitten", "sitting", 3}} {
		if got := editDistance(c.a, c.b); got != c.d {
			t.Errorf("editDistance(%q, %q) = %d, want %d", c.a, c.b, got, c.d)
		}
	}
}

// The worker token file: one that its group or others may read is refused
// (naming the file and the fix); at the default path a missing or empty file
// is no token, and a token there comes before the systemd credential, which
// systemd never updates while the unit runs.
func TestWorkerTokenFileRules(t *testing.T) {
	t.Parallel()
	dir := setup(t, map[string]string{"token": "from-file\n", "empty": "", "worker-token": "from-credential\n"})
	p := func(name string) string { return filepath.Join(dir, name) }
	loose := p("loose")
	if err := os.WriteFile(loose, []byte("from-loose\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(loose, 0o644); err != nil { // whatever the umask
		t.Fatal(err)
	}
	_, _, err := loadW(t, fmt.Sprintf("[orchestrator]\ntoken_file = %q\n", loose), env())
	if err == nil || !strings.Contains(err.Error(), "w.toml:2: key orchestrator.token_file: cannot read "+loose+": its mode 0644 lets others read the token") ||
		!strings.Contains(err.Error(), "chmod 600 "+loose) || strings.Contains(err.Error(), "from-loose") {
		t.Errorf("a world-readable token file: %v", err)
	}

	creds := func(k string) string { return map[string]string{"CREDENTIALS_DIRECTORY": dir}[k] }
	for _, tt := range []struct {
		name, defFile, want string
		getenv              func(string) string
	}{
		{"default file beats the credential", p("token"), "from-file", creds},
		{"missing default file", p("nonexistent"), "from-credential", creds},
		{"empty default file", p("empty"), "from-credential", creds},
		{"nothing at all", p("nonexistent"), "", env()},
	} {
		c := DefaultWorker()
		c.Orchestrator.TokenFile = tt.defFile
		l := newLoader(c)
		l.secret("orchestrator.token", "orchestrator.token_file", tt.defFile, "worker-token", tt.getenv, true)
		if len(l.errs) > 0 || c.Orchestrator.Token.Value() != tt.want {
			t.Errorf("%s: token %q, errors %v; want %q", tt.name, c.Orchestrator.Token.Value(), l.errs, tt.want)
		}
	}
	c := DefaultWorker()
	c.Orchestrator.TokenFile = loose
	l := newLoader(c)
	l.secret("orchestrator.token", "orchestrator.token_file", loose, "worker-token", creds, true)
	if len(l.errs) != 1 || !strings.Contains(l.errs[0].Error(), "lets others read the token") {
		t.Errorf("a world-readable default file is refused too: %v", l.errs)
	}
	// A token in the file with token_file left at its default: no conflict.
	w, _, err := loadW(t, "[orchestrator]\ntoken = \"inline\"\n", env())
	if err != nil || w.Orchestrator.Token.Value() != "inline" || !w.TokenRereadable() {
		t.Errorf("inline token: %q %v rereadable=%v", w.Orchestrator.Token.Value(), err, w.TokenRereadable())
	}
	w, _, err = loadW(t, "", env("SIMPLETUNER_WORKER_TOKEN", "env"))
	if err != nil || w.TokenRereadable() {
		t.Errorf("a token from the environment cannot change: %v rereadable=%v", err, w.TokenRereadable())
	}
}

// A secret in the S3 endpoint's URL is refused without being repeated.
func TestS3EndpointSecretNotEchoed(t *testing.T) {
	t.Parallel()
	for _, e := range []string{"https://minio:hunter2@s3.example:9000", "http://hunter2@s3.example", "https://a:hunter2@x y/%zz"} {
		_, _, err := loadO(t, fmt.Sprintf("[artifacts]\nbackend = \"s3\"\ns3_bucket = \"bkt\"\ns3_endpoint = %q\n", e), env())
		if err == nil || !strings.Contains(err.Error(), "holds a user or password") || strings.Contains(err.Error(), "hunter2") {
			t.Errorf("%s: %v", e, err)
		}
	}
}
