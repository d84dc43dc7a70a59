package config

import (
	"crypto/tls"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/simpletuner/simpletuner-orchestration/internal/auth"
	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
)

// Validate checks a configuration built in code (tests, other packages).
// Loaded configurations are already validated.
func (c *Orchestrator) Validate() error {
	l := newLoader(c)
	c.validate(l)
	return asErrors(l.errs)
}

// Validate checks a configuration built in code; see Require for run time.
func (c *Worker) Validate() error {
	l := newLoader(c)
	c.validate(l)
	return asErrors(l.errs)
}

// Require reports what the worker needs before it can connect: an
// orchestrator URL and a token. Validation alone does not demand them.
func (c *Worker) Require() error {
	return asErrors(c.required())
}

// WithRequired adds what Require finds to loadErr, the problems LoadWorker
// found, so that --check-config reports every mistake at once (an admin
// token given as the worker's beside a bad duration, say) rather than one
// round after another. When the file could not be read or parsed, what it
// sets is unknown and loadErr is returned alone.
func (c *Worker) WithRequired(loadErr error) error {
	var all Errors
	if !errors.As(loadErr, &all) {
		return loadErr
	}
	if c.fileUnread {
		return loadErr
	}
	return asErrors(append(slices.Clone(all), c.required()...))
}

func (c *Worker) required() []error {
	var errs []error
	if c.Orchestrator.URL == "" {
		errs = append(errs, &Error{Key: "orchestrator.url", Msg: "not set (config file, SIMPLETUNER_ORCHESTRATOR_URL or --orchestrator-url)"})
	}
	if c.Orchestrator.Token == "" {
		errs = append(errs, &Error{Key: "orchestrator.token", Msg: `not set (token, token_file, systemd credential "worker-token", SIMPLETUNER_WORKER_TOKEN or --worker-token)`})
	} else if err := auth.Diagnose(c.Orchestrator.Token.Value(), auth.KindWorker); err != nil {
		// Checked here, before any request: the shape alone tells a mistyped
		// token or an admin token from one the orchestrator might know.
		errs = append(errs, &Error{Where: c.Origin("orchestrator.token"), Key: "orchestrator.token", Msg: err.Error()})
	}
	return errs
}

func (c *Orchestrator) validate(l *loader) {
	l.positiveDurations()
	for _, a := range c.Server.Listen {
		if msg := checkHostPort(a); msg != "" {
			l.errf("server.listen", "%q: %s", a, msg)
		}
	}
	if s := c.Server.AdminSocket; s != "" && !filepath.IsAbs(s) {
		l.errf("server.admin_socket", "%q must be an absolute path (or \"\" to disable)", s)
	}
	l.positive("server.max_body_bytes", c.Server.MaxBodyBytes)
	if p := c.Server.PublicURL; p != "" {
		if msg := checkPublicURL(p); msg != "" {
			l.errf("server.public_url", "%q: %s", p, msg)
		}
	}
	l.positive("server.max_log_followers", int64(c.Server.MaxLogFollowers))

	if (c.TLS.CertFile == "") != (c.TLS.KeyFile == "") {
		key := "tls.cert_file"
		if c.TLS.CertFile == "" {
			key = "tls.key_file"
		}
		l.errf(key, "tls.cert_file and tls.key_file must be set together")
	}
	if c.TLS.ClientCAFile != "" && !c.TLS.Enabled() {
		l.errf("tls.client_ca_file", "needs tls.cert_file and tls.key_file")
	}
	l.readable("tls.cert_file", c.TLS.CertFile)
	l.readable("tls.key_file", c.TLS.KeyFile)
	l.readable("tls.client_ca_file", c.TLS.ClientCAFile)

	if msg := checkDatabaseURL(c.Database.URL.Value()); msg != "" {
		l.errf("database.url", "%s", msg)
	}
	l.nonEmpty("paths.state_dir", c.Paths.StateDir)
	l.nonEmpty("paths.configs_dir", c.Paths.ConfigsDir)

	if w := c.Workers; w.HeartbeatTimeout.Duration > 0 && w.HeartbeatTimeout.Duration <= w.HeartbeatInterval.Duration {
		key := "workers.heartbeat_timeout" // blame whichever was set last
		if l.src["workers.heartbeat_interval"].layer > l.src[key].layer {
			key = "workers.heartbeat_interval"
		}
		l.errf(key, "heartbeat_timeout (%v) must be longer than heartbeat_interval (%v)", w.HeartbeatTimeout, w.HeartbeatInterval)
	}
	if c.Jobs.MaxRetries < 0 {
		l.errf("jobs.max_retries", "must be 0 or more, got %d", c.Jobs.MaxRetries)
	}
	l.positive("jobs.log_limit_bytes", c.Jobs.LogLimitBytes)
	l.positive("auth.failures_per_minute", int64(c.Auth.FailuresPerMinute))
	l.positive("auth.failure_audit_max_peers", int64(c.Auth.FailureAuditMaxPeers))
	if v := c.Auth.Visibility; v != "" && v != "team" && v != "all" {
		l.errf("auth.visibility", "must be \"team\", \"all\" or \"\" (team when [[teams]] are configured, else all); got %q", v)
	}
	l.validateLog(c.Log)
	if a := c.Metrics.Listen; a != "" {
		if msg := checkHostPort(a); msg != "" {
			l.errf("metrics.listen", "%q: %s (or \"\" to disable)", a, msg)
		}
	}
	l.validateArtifacts(c.Artifacts)
	if n := c.Retention.BatchSize; n < 1 || n > 10000 {
		l.errf("retention.batch_size", "must be from 1 to 10000, got %d", n)
	}
	l.validateWebhooks(c)
	l.validateLDAP(c)
	l.validateOIDC(c)
	l.validateGroups(c)
	l.validateTeams(c)
	l.validateApprovalRules(c)
}

func (l *loader) validateArtifacts(a ArtifactsConfig) {
	l.positive("artifacts.max_object_bytes", a.MaxObjectBytes)
	l.positive("artifacts.max_job_bytes", a.MaxJobBytes)
	l.positive("artifacts.max_job_objects", int64(a.MaxJobObjects))
	if a.ReservePercent < 0 || a.ReservePercent > 50 {
		l.errf("artifacts.reserve_percent", "%g must be between 0 (no reserve) and 50", a.ReservePercent)
	}
	if a.Dir != "" && !filepath.IsAbs(a.Dir) {
		l.errf("artifacts.dir", "%q must be an absolute path (or \"\" for <state_dir>/artifacts)", a.Dir)
	}
	switch a.Backend {
	case "local":
	case "s3":
		if a.S3Endpoint == "" {
			l.errf("artifacts.s3_endpoint", "must be set with backend = \"s3\", e.g. \"https://s3.eu-west-1.amazonaws.com\" or \"http://minio.internal:9000\"")
		}
		if a.S3Bucket == "" {
			l.errf("artifacts.s3_bucket", "must be set with backend = \"s3\"")
		}
		if (a.S3AccessKey == "") != (a.S3SecretKey == "") {
			key := "artifacts.s3_secret_key"
			if a.S3AccessKey == "" {
				key = "artifacts.s3_access_key"
			}
			l.errf(key, "s3_access_key and s3_secret_key must be set together (or both left empty to use AWS_*/MINIO_* variables or an IAM role)")
		}
	default:
		l.errf("artifacts.backend", "%q is not one of local, s3", a.Backend)
	}
	if e := a.S3Endpoint; e != "" {
		u, err := url.Parse(e)
		switch {
		case hasUserinfo(e):
			// The endpoint is logged and printed as it is: a secret in it
			// would be too.
			l.errf("artifacts.s3_endpoint", "%q holds a user or password; they would be logged with the URL: set s3_access_key "+
				"and s3_secret_key_file (or s3_secret_key) instead, and change that secret", redactUserinfo(e))
		case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || strings.Trim(u.Path, "/") != "" || u.RawQuery != "":
			l.errf("artifacts.s3_endpoint", "%q must be http(s)://host[:port] without a path", e)
		}
	}
	if b := a.S3Bucket; b != "" && !validS3Bucket(b) {
		l.errf("artifacts.s3_bucket", "%q is not an S3 bucket name (3-63 lowercase letters, digits, '.' and '-', starting and ending with a letter or digit)", b)
	}
	if p := a.S3Prefix; p != "" && (strings.HasPrefix(p, "/") || !strings.HasSuffix(p, "/") || strings.Contains(p, "//")) {
		l.errf("artifacts.s3_prefix", "%q must be \"\" or a relative path ending in \"/\", e.g. \"simpletuner/\"", p)
	}
}

func validS3Bucket(b string) bool {
	if len(b) < 3 || len(b) > 63 {
		return false
	}
	for i := 0; i < len(b); i++ {
		c := b[i]
		edge := i == 0 || i == len(b)-1
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || !edge && (c == '.' || c == '-')) {
			return false
		}
	}
	return !strings.Contains(b, "..")
}

func (c *Worker) validate(l *loader) {
	l.positiveDurations()
	if u := c.Orchestrator.URL; u != "" {
		urls := OrchestratorURLs(u)
		for _, one := range urls {
			if msg := checkOrchestratorURL(one); one != "" && msg != "" {
				l.errf("orchestrator.url", "%q: %s", one, msg)
			}
		}
		if len(urls) > 1 && slices.ContainsFunc(urls, func(s string) bool { return strings.HasPrefix(s, "unix:") }) {
			l.errf("orchestrator.url", "a unix:// socket cannot be one of several URLs: it names this machine's only orchestrator")
		}
		if slices.Contains(urls, "") {
			l.errf("orchestrator.url", "%q has an empty entry; separate URLs with single commas", u)
		}
	}
	l.readable("orchestrator.ca_file", c.Orchestrator.CAFile)
	l.clientCertificate(c.Orchestrator)
	if err := protocol.CheckLabels(c.Worker.Labels); err != nil {
		l.errf("worker.labels", "%v", err)
	}
	if err := protocol.CheckPrintable(c.Worker.Name); err != nil {
		l.errf("worker.name", "%q %v", c.Worker.Name, err)
	}
	l.nonEmpty("worker.state_dir", c.Worker.StateDir)
	if len(c.Job.Command) == 0 || c.Job.Command[0] == "" {
		l.errf("job.command", "must name a program, e.g. [\"python3\", \"-m\", \"simpletuner.train\"]")
	}
	for _, k := range slices.Sorted(maps.Keys(c.Job.Env)) {
		if k == "" || strings.ContainsAny(k, "=\x00") {
			l.errf("job.env", "%q is not a valid environment variable name", k)
		}
	}
	for _, p := range c.Job.PassEnv {
		if _, err := path.Match(p, ""); err != nil || p == "" || strings.ContainsAny(p, "=\x00/") {
			l.errf("job.pass_env", "%q is not a variable name or a glob pattern of names (like \"HF_*\")", p)
		} else if SecretLikeName(p) {
			l.errf("job.pass_env", "%q looks like a secret's name; workerd never passes one of its own environment to jobs: "+
				"give jobs a secret in [job] env or with the job itself", p)
		}
	}
	l.positive("job.log_limit_bytes", c.Job.LogLimitBytes)
	if !slices.Contains([]string{"auto", "cgroup", "process-group"}, c.Job.Isolation) {
		l.errf("job.isolation", "%q is not one of auto, cgroup, process-group", c.Job.Isolation)
	}
	if c.Job.UIDRange != "" {
		if _, _, err := ParseUIDRange(c.Job.UIDRange); err != nil {
			l.errf("job.uid_range", "%v", err)
		}
	}
	if _, err := ParseBytes(c.Job.MemoryMax); err != nil {
		l.errf("job.memory_max", "%v", err)
	}
	if c.Job.TasksMax < 0 {
		l.errf("job.tasks_max", "must not be negative (0: no limit)")
	}
	if c.Job.KeepCheckpoints < 1 || c.Job.KeepCheckpoints > 100 {
		l.errf("job.keep_checkpoints", "must be from 1 to 100 (turn checkpoints off with job.checkpoints = false)")
	}
	if _, err := ParseBytes(c.Job.CheckpointUploadRate); err != nil {
		l.errf("job.checkpoint_upload_rate", "%v (bytes per second)", err)
	}
	if c.Worker.MaxJobs < 0 || (c.Worker.MaxJobs == 0 && l.src["worker.max_jobs"].set()) {
		l.errf("worker.max_jobs", "must be at least 1 (leave it out for one job per GPU)")
	}
	l.validateGPU(c.GPU)
	l.validateLog(c.Log)
}

// validateGPU checks the [gpu] table: a known backend and vendor, and
// [[gpu.devices]] entries (each named, with memory, a unique printable UUID
// and an absolute device node) with the static backend only, which needs one.
func (l *loader) validateGPU(g GPUConfig) {
	if !slices.Contains([]string{"nvml", "static", "none"}, g.Backend) {
		l.errf("gpu.backend", "%q is not one of nvml, static, none", g.Backend)
	}
	if !slices.Contains([]string{"nvidia", "amd"}, g.Vendor) {
		l.errf("gpu.vendor", "%q is not one of nvidia, amd", g.Vendor)
	}
	switch {
	case l.failed["gpu.devices"]:
		return
	case g.Backend == "static" && len(g.Devices) == 0:
		l.errAt(l.src["gpu.backend"].where, "gpu.devices", "backend \"static\" needs at least one [[gpu.devices]] entry (name, memory_gb)")
	case g.Backend != "static" && len(g.Devices) > 0:
		l.errf("gpu.devices", "only with backend = \"static\" (backend is %q)", g.Backend)
	}
	uuids := map[string]int{}
	for i, d := range g.Devices {
		at := func(format string, args ...any) { l.entryErrf("gpu.devices", i, format, args...) }
		if strings.TrimSpace(d.Name) == "" {
			at("name is missing")
		}
		if d.MemoryGB <= 0 {
			at("memory_gb must be positive, got %v", d.MemoryGB)
		}
		if n := utf8.RuneCountInString(d.UUID); n > protocol.MaxGPUUUID {
			at("uuid is %d characters long; the orchestrator takes at most %d", n, protocol.MaxGPUUUID)
		} else if err := protocol.CheckPrintable(d.UUID); err != nil {
			at("uuid %v", err)
		}
		if d.UUID != "" {
			if j, dup := uuids[d.UUID]; dup {
				at("uuid %q is also entry %d's", d.UUID, j)
			}
			uuids[d.UUID] = i + 1
		}
		if d.DeviceNode != "" && !filepath.IsAbs(d.DeviceNode) {
			at("device_node %q must be an absolute path", d.DeviceNode)
		}
	}
}

// clientCertificate checks the worker's client certificate settings: both
// files or neither, readable, a matching pair, and an https:// URL to present
// them to.
func (l *loader) clientCertificate(o ConnectionConfig) {
	if o.CertFile == "" && o.KeyFile == "" {
		return
	}
	if o.CertFile == "" || o.KeyFile == "" {
		key := "orchestrator.cert_file"
		if o.CertFile != "" {
			key = "orchestrator.key_file"
		}
		l.errf(key, "orchestrator.cert_file and orchestrator.key_file must be set together")
		return
	}
	before := len(l.errs)
	l.readable("orchestrator.cert_file", o.CertFile)
	l.readable("orchestrator.key_file", o.KeyFile)
	if len(l.errs) > before {
		return
	}
	if _, err := tls.LoadX509KeyPair(o.CertFile, o.KeyFile); err != nil {
		l.errf("orchestrator.cert_file", "%s and key_file %s are not a usable PEM certificate and key: %v", o.CertFile, o.KeyFile, err)
	}
	for _, one := range OrchestratorURLs(o.URL) {
		if u, err := url.Parse(one); one != "" && err == nil && u.Scheme != "https" {
			l.errf("orchestrator.cert_file", "a client certificate is only sent over TLS; orchestrator.url must start with https://, not %s://", u.Scheme)
			break
		}
	}
}

func (l *loader) validateLog(c LogConfig) {
	if _, ok := logLevels[c.Level]; !ok {
		l.errf("log.level", "%q is not one of debug, info, warn, error", c.Level)
	}
	if !slices.Contains([]string{"auto", "text", "json"}, c.Format) {
		l.errf("log.format", "%q is not one of auto, text, json", c.Format)
	}
}

// positiveDurations: every duration in both configs must be > 0 (negative
// ones were refused when parsed).
func (l *loader) positiveDurations() {
	for _, key := range slices.Sorted(maps.Keys(l.fields)) {
		if slices.Contains(retentionPeriods, key) {
			continue // 0 keeps forever
		}
		if f := l.fields[key]; f.Type() == durationType && f.Interface().(Duration).Duration <= 0 {
			l.errf(key, "must be greater than 0")
		}
	}
}

func (l *loader) positive(key string, n int64) {
	if n <= 0 {
		l.errf(key, "must be greater than 0, got %d", n)
	}
}

func (l *loader) nonEmpty(key, s string) {
	if s == "" {
		l.errf(key, "must not be empty")
	}
}

// readable checks that a referenced file can be opened, so --check-config
// catches a wrong path before the daemon starts.
func (l *loader) readable(key, path string) {
	if path == "" {
		return
	}
	f, err := os.Open(path)
	if err != nil {
		l.errf(key, "cannot read %s: %v", path, pathErr(err))
		return
	}
	f.Close()
}

func checkHostPort(a string) string {
	_, port, err := net.SplitHostPort(a)
	if err != nil {
		return "want host:port, e.g. \"0.0.0.0:8001\" or \"[::1]:8001\""
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return "port must be a number from 0 to 65535"
	}
	return ""
}

// checkDatabaseURL never echoes the URL: it may hold a password.
func checkDatabaseURL(u string) string {
	if u == "" {
		return ""
	}
	scheme, rest, ok := strings.Cut(u, "://")
	switch strings.ToLower(scheme) {
	case "postgres", "postgresql":
		if ok {
			return ""
		}
	case "sqlite":
		if ok && rest != "" {
			return ""
		}
		if ok {
			return "sqlite:// needs a path, e.g. sqlite:///var/lib/simpletuner/orchestrator.db"
		}
	}
	return "want \"\" (SQLite in state_dir), postgres://, postgresql:// or sqlite:///path"
}

// OrchestratorURLs splits orchestrator.url into the URLs it lists, in
// order: one URL, or several separated by commas (replicas a worker tries in
// turn). Blanks around each are dropped; an empty entry stays "".
func OrchestratorURLs(s string) []string {
	if strings.TrimSpace(s) == "" {
		return nil
	}
	parts := strings.Split(s, ",")
	for i, p := range parts {
		parts[i] = strings.TrimSpace(p)
	}
	return parts
}

func checkOrchestratorURL(s string) string {
	if !strings.Contains(s, "://") {
		return "missing scheme; want http://, https:// or unix://"
	}
	u, err := url.Parse(s)
	if err != nil {
		return "not a valid URL"
	}
	switch u.Scheme {
	case "http", "https":
		if u.Host == "" {
			return "missing host"
		}
	case "unix":
		if u.Path == "" {
			return "missing socket path, e.g. unix:///run/simpletuner/orchestratord.sock"
		}
	default:
		return "unsupported scheme " + strconv.Quote(u.Scheme) + "; want http://, https:// or unix://"
	}
	return ""
}

// checkPublicURL accepts the origin browsers use: http(s)://host[:port],
// no user, path, query or fragment.
func checkPublicURL(s string) string {
	u, err := url.Parse(strings.TrimSuffix(s, "/"))
	switch {
	case err != nil:
		return "not a valid URL"
	case u.Scheme != "http" && u.Scheme != "https":
		return "want an http:// or https:// URL, e.g. https://orchestrator.example.com"
	case u.Host == "":
		return "missing host"
	case u.User != nil:
		return "must not hold a user or password"
	case u.Path != "" || u.RawQuery != "" || u.Fragment != "":
		return "must be an origin, scheme://host[:port], without a path: the dashboard lives under /ui/ there"
	}
	return ""
}

// ParseUIDRange reads "FIRST-LAST": two uids above 0, in order.
func ParseUIDRange(s string) (lo, hi uint32, err error) {
	a, b, ok := strings.Cut(strings.TrimSpace(s), "-")
	x, err1 := strconv.ParseUint(strings.TrimSpace(a), 10, 32)
	y, err2 := strconv.ParseUint(strings.TrimSpace(b), 10, 32)
	if !ok || err1 != nil || err2 != nil || x == 0 || y < x || y >= 1<<32-1 {
		return 0, 0, fmt.Errorf("%q: want FIRST-LAST, two uids above 0 in order", s)
	}
	return uint32(x), uint32(y), nil
}

// secretWords mark a variable name as a secret's: workerd never hands a job
// such a variable of its own environment (its token, an admin token, a
// password of the shell it was started from), whatever job.pass_env says.
var secretWords = []string{"TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "PRIVATE_KEY", "API_KEY", "ACCESS_KEY"}

// SecretLikeName reports whether an environment variable name (or a
// pattern of names) looks like a secret's: it contains TOKEN, SECRET,
// PASSWORD, PASSWD, CREDENTIAL, PRIVATE_KEY, API_KEY or ACCESS_KEY, or ends
// in _KEY, in any case.
func SecretLikeName(name string) bool {
	up := strings.ToUpper(name)
	return strings.HasSuffix(up, "_KEY") || slices.ContainsFunc(secretWords, func(w string) bool { return strings.Contains(up, w) })
}

// hasUserinfo reports whether a URL's authority holds "user@" or
// "user:password@", parseable or not.
func hasUserinfo(s string) bool {
	_, rest, ok := strings.Cut(s, "://")
	if !ok {
		rest = s
	}
	authority, _, _ := strings.Cut(rest, "/")
	return strings.Contains(authority, "@")
}

// redactUserinfo replaces a URL's user and password with "REDACTED".
func redactUserinfo(s string) string {
	scheme, rest, ok := strings.Cut(s, "://")
	if !ok {
		scheme, rest = "", s
	} else {
		scheme += "://"
	}
	authority, path, hasPath := strings.Cut(rest, "/")
	if i := strings.LastIndexByte(authority, '@'); i >= 0 {
		authority = "REDACTED" + authority[i:]
	}
	if hasPath {
		path = "/" + path
	}
	return scheme + authority + path
}
