// Package config loads the two daemons' configuration: built-in defaults, then
// the TOML file, then SIMPLETUNER_* environment variables, then command-line
// flags. Everything is validated once and every problem is reported together,
// each naming where the bad value came from (file:line, variable or flag).
package config

import (
	"fmt"
	"log/slog"
	"math"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Default file locations; a missing default file means built-in defaults.
const (
	DefaultOrchestratorPath = "/etc/simpletuner/orchestratord.toml"
	DefaultWorkerPath       = "/etc/simpletuner/workerd.toml"
	// DefaultWorkerTokenFile is where the package keeps the worker token
	// (created empty, mode 0600). Read at this default path, a missing or
	// empty file means "no token here" rather than an error.
	DefaultWorkerTokenFile = "/etc/simpletuner/worker-token"
)

// Duration is a time.Duration written as a Go duration string ("30s").
type Duration struct{ time.Duration }

// D is shorthand for building a Duration in code and tests.
func D(d time.Duration) Duration { return Duration{d} }

// UnmarshalText parses a Go duration string, which may start with a number
// of days ("90d", "1d12h"); negative durations are refused.
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := parseDuration(string(b))
	if err != nil {
		return fmt.Errorf("invalid duration %q (want e.g. \"30s\", \"5m\", \"90d\")", b)
	}
	if v < 0 {
		return fmt.Errorf("duration %q is negative", b)
	}
	d.Duration = v
	return nil
}

// day is the unit "d" of durations: 24 hours (retention periods are days).
const day = 24 * time.Hour

// parseDuration is time.ParseDuration with an optional leading "<n>d".
func parseDuration(s string) (time.Duration, error) {
	days, rest, ok := strings.Cut(s, "d")
	if !ok || days == "" || strings.ContainsFunc(days, func(r rune) bool { return r < '0' || r > '9' }) {
		return time.ParseDuration(s)
	}
	n, err := strconv.ParseInt(days, 10, 64)
	if err != nil || n > int64(math.MaxInt64/day) {
		return 0, fmt.Errorf("days out of range")
	}
	v := time.Duration(n) * day
	if rest == "" {
		return v, nil
	}
	more, err := time.ParseDuration(rest)
	if err != nil || more < 0 || v > math.MaxInt64-more {
		return 0, fmt.Errorf("bad duration after the days")
	}
	return v + more, nil
}

// MarshalText writes the shortest natural form: "2m" rather than "2m0s",
// "90d" for a whole number of days.
func (d Duration) MarshalText() ([]byte, error) { return []byte(d.String()), nil }

func (d Duration) String() string {
	if d.Duration >= day && d.Duration%day == 0 {
		return strconv.FormatInt(int64(d.Duration/day), 10) + "d"
	}
	s := d.Duration.String()
	if strings.HasSuffix(s, "m0s") {
		s = s[:len(s)-2]
	}
	if strings.HasSuffix(s, "h0m") {
		s = s[:len(s)-2]
	}
	return s
}

// Secret is a string that never prints: String, MarshalText and every fmt verb
// show "<redacted>" (or "" when empty). Value returns the real thing.
type Secret string

const redacted = "<redacted>"

// Value returns the secret itself; call it only where the secret is used.
func (s Secret) Value() string { return string(s) }

func (s Secret) String() string {
	if s == "" {
		return ""
	}
	return redacted
}

// GoString keeps %#v from printing the value.
func (s Secret) GoString() string { return fmt.Sprintf("config.Secret(%q)", s.String()) }

// MarshalText redacts, so encoding a config (e.g. --check-config) never leaks.
func (s Secret) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// Format applies to every verb, including %v, %s, %q, %x and %#v.
func (s Secret) Format(f fmt.State, verb rune) {
	switch verb {
	case 'q':
		fmt.Fprintf(f, "%q", s.String())
	case 'v':
		if f.Flag('#') {
			fmt.Fprint(f, s.GoString())
			return
		}
		fmt.Fprint(f, s.String())
	default:
		fmt.Fprint(f, s.String())
	}
}

// Orchestrator is simpletuner-orchestratord's configuration.
type Orchestrator struct {
	Server    ServerConfig    `toml:"server"`
	TLS       TLSConfig       `toml:"tls"`
	Database  DatabaseConfig  `toml:"database"`
	Paths     PathsConfig     `toml:"paths"`
	Workers   WorkersConfig   `toml:"workers"`
	Jobs      JobsConfig      `toml:"jobs"`
	Auth      AuthConfig      `toml:"auth"`
	Log       LogConfig       `toml:"log"`
	Metrics   MetricsConfig   `toml:"metrics"`
	Artifacts ArtifactsConfig `toml:"artifacts"`
	Retention RetentionConfig `toml:"retention"`
	// WebhookDelivery is how events reach the subscriptions, Webhooks the
	// subscriptions kept in this file.
	WebhookDelivery WebhookDeliveryConfig `toml:"webhook_delivery"`
	Webhooks        []WebhookConfig       `toml:"webhooks"`
	// Teams are the teams that share the fleet ([[teams]]); a token
	// without one is in DefaultTeam.
	Teams []TeamConfig `toml:"teams"`
	// ApprovalRules hold matching jobs at submit until they are approved
	// ([[approval_rules]]).
	ApprovalRules []ApprovalRuleConfig `toml:"approval_rules"`

	origins map[string]string // key → where it was set (file:line, variable, flag)
}

// Origin says where a key's value came from: "file.toml:12", an environment
// variable, a flag, or "" for the built-in default.
func (c *Orchestrator) Origin(key string) string { return c.origins[key] }

// ServerConfig is [server].
type ServerConfig struct {
	Listen       []string `toml:"listen"`
	AdminSocket  string   `toml:"admin_socket"`
	AdminGroup   string   `toml:"admin_group"`
	MaxBodyBytes int64    `toml:"max_body_bytes"`
	InstanceID   string   `toml:"instance_id"` // "" → hostname+pid, chosen at run time
	// StreamWriteTimeout bounds each write to an event stream (worker
	// streams, log follows): a client that stops reading is dropped.
	StreamWriteTimeout Duration `toml:"stream_write_timeout"`
	// MaxLogFollowers caps the log follow streams one credential holds open.
	MaxLogFollowers int `toml:"max_log_followers"`
	// PublicURL is where browsers and admins reach this orchestrator when
	// that is not its listener: a TLS proxy in front of it ("" none).
	PublicURL string `toml:"public_url"`
	// BodyTimeout bounds the wait for a request body: it must arrive within
	// this long, or move on by BodyProgressBytes within each such period.
	BodyTimeout Duration `toml:"body_timeout"`
}

// PublicURL parses server.public_url; nil when it is not set. Validation
// has refused anything else than an http(s) origin.
func (c *Orchestrator) PublicURL() *url.URL {
	if c.Server.PublicURL == "" {
		return nil
	}
	u, err := url.Parse(strings.TrimSuffix(c.Server.PublicURL, "/"))
	if err != nil {
		return nil
	}
	return u
}

// BodyProgressBytes is how much of a request body must arrive within each
// server.body_timeout for the body to go on.
const BodyProgressBytes = 64 << 10

// TLSConfig is [tls]; cert and key both set → HTTPS.
type TLSConfig struct {
	CertFile     string `toml:"cert_file"`
	KeyFile      string `toml:"key_file"`
	ClientCAFile string `toml:"client_ca_file"`
}

// Enabled reports whether the TCP listeners serve HTTPS.
func (t TLSConfig) Enabled() bool { return t.CertFile != "" && t.KeyFile != "" }

// DatabaseConfig is [database]; after loading, URL holds the secret whatever
// its source (url, url_file or the "database-url" credential).
type DatabaseConfig struct {
	URL     Secret `toml:"url"`
	URLFile string `toml:"url_file"`
	// Timeout bounds how long PostgreSQL may leave a request unanswered
	// before its connection is taken for dead (a path that went silent
	// without closing); 0 waits forever.
	Timeout Duration `toml:"timeout"`
}

// PathsConfig is [paths].
type PathsConfig struct {
	StateDir   string `toml:"state_dir"`
	ConfigsDir string `toml:"configs_dir"`
}

// WorkersConfig is [workers].
type WorkersConfig struct {
	HeartbeatInterval     Duration `toml:"heartbeat_interval"`
	HeartbeatTimeout      Duration `toml:"heartbeat_timeout"`
	HealthCheckInterval   Duration `toml:"health_check_interval"`
	StartupGrace          Duration `toml:"startup_grace"`
	AckTimeout            Duration `toml:"ack_timeout"`
	EphemeralCleanupAfter Duration `toml:"ephemeral_cleanup_after"`
	PingInterval          Duration `toml:"ping_interval"`
}

// JobsConfig is [jobs].
type JobsConfig struct {
	MaxRetries          int      `toml:"max_retries"`
	CancelGrace         Duration `toml:"cancel_grace"`
	CancelReportTimeout Duration `toml:"cancel_report_timeout"` // after the grace, before forcing "cancelled"
	LogLimitBytes       int64    `toml:"log_limit_bytes"`
	SchedulerInterval   Duration `toml:"scheduler_interval"` // periodic scheduler tick
	// Preemption ("on" or "off"): whether a waiting job of a team under
	// its share, or of higher priority, stops running jobs of a team over
	// its share (they are requeued without spending a retry).
	Preemption string `toml:"preemption"`
	// MinRuntime is how long a job runs before it may be preempted.
	MinRuntime Duration `toml:"min_runtime"`
	// UsageHalfLife is how fast past GPU use fades from a team's usage:
	// use this old counts half.
	UsageHalfLife Duration `toml:"usage_half_life"`
}

// PreemptionOn reports whether [jobs] preemption is on.
func (j JobsConfig) PreemptionOn() bool { return j.Preemption != "off" }

// AuthConfig is [auth].
type AuthConfig struct {
	FailuresPerMinute int `toml:"failures_per_minute"`
	// RecheckInterval: how often a long-lived stream checks that the
	// credential that opened it is still valid.
	RecheckInterval Duration `toml:"recheck_interval"`
	// FailureAuditInterval: failed authentications are written to the audit
	// log as one record per client address per interval, with a count.
	FailureAuditInterval Duration `toml:"failure_audit_interval"`
	// FailureAuditMaxPeers caps those records per interval; the rest are
	// summed up in one record.
	FailureAuditMaxPeers int `toml:"failure_audit_max_peers"`
	// Visibility is whose jobs a token reads: "team" (its own team's),
	// "all" (every team's; writes stay within the team), or "" (team when
	// any [[teams]] is configured, else all).
	Visibility string `toml:"visibility"`
	// LoginTokenTTL is how long the token of a simpletunerctl login lasts.
	LoginTokenTTL Duration `toml:"login_token_ttl"`
	// PeopleTokens lets a person create long-lived tokens of their own
	// (POST /api/auth/tokens); false allows only logins and sessions.
	PeopleTokens bool `toml:"people_tokens"`
	// PersonalTokenMaxTTL bounds the life of a person's own token.
	PersonalTokenMaxTTL Duration `toml:"personal_token_max_ttl"`
	// LDAP is [auth.ldap]: sign-in against a directory (off without url).
	LDAP LDAPConfig `toml:"ldap"`
	// OIDC is [auth.oidc]: sign-in with an OpenID provider (off without issuer).
	OIDC OIDCConfig `toml:"oidc"`
	// Groups is [[auth.groups]]: what a directory group grants.
	Groups []GroupMapping `toml:"groups"`
}

// LogConfig is [log] in both daemons.
type LogConfig struct {
	Level  string `toml:"level"`  // debug|info|warn|error
	Format string `toml:"format"` // auto|text|json
}

// logLevels are the names log.level accepts.
var logLevels = map[string]slog.Level{"debug": slog.LevelDebug, "info": slog.LevelInfo, "warn": slog.LevelWarn, "error": slog.LevelError}

// SlogLevel is the level log.level names (info for a name validation would refuse).
func (c LogConfig) SlogLevel() slog.Level {
	if l, ok := logLevels[c.Level]; ok {
		return l
	}
	return slog.LevelInfo
}

// ArtifactsConfig is [artifacts]: where the files jobs upload are kept.
type ArtifactsConfig struct {
	Backend         string   `toml:"backend"` // local|s3
	Dir             string   `toml:"dir"`     // local: "" → <state_dir>/artifacts
	MaxObjectBytes  int64    `toml:"max_object_bytes"`
	MaxJobBytes     int64    `toml:"max_job_bytes"`
	MaxJobObjects   int      `toml:"max_job_objects"`
	UploadGrace     Duration `toml:"upload_grace"` // uploads still accepted this long after an attempt ends
	S3Endpoint      string   `toml:"s3_endpoint"`  // http(s)://host[:port]
	S3Bucket        string   `toml:"s3_bucket"`
	S3Region        string   `toml:"s3_region"`
	S3Prefix        string   `toml:"s3_prefix"`
	S3AccessKey     string   `toml:"s3_access_key"`
	S3SecretKey     Secret   `toml:"s3_secret_key"`
	S3SecretKeyFile string   `toml:"s3_secret_key_file"`
	// ReservePercent (local): the share of the disk's bytes and inodes
	// that uploads leave free, for all jobs together.
	ReservePercent float64 `toml:"reserve_percent"`
}

// DefaultArtifactReservePercent is the share of the artifacts' filesystem
// (bytes and inodes) kept free of uploads: room for other jobs' checkpoints
// and, on the state disk, for the database.
const DefaultArtifactReservePercent = 5

// ArtifactsDir is the local backend's directory.
func (c *Orchestrator) ArtifactsDir() string {
	if c.Artifacts.Dir != "" {
		return c.Artifacts.Dir
	}
	return filepath.Join(c.Paths.StateDir, "artifacts")
}

// RetentionConfig is [retention]: how long finished jobs and their traces are
// kept. A period of 0 keeps them forever.
type RetentionConfig struct {
	Jobs      Duration `toml:"jobs"`      // finished jobs, with their attempts, logs and artifacts
	Logs      Duration `toml:"logs"`      // finished jobs' logs
	Artifacts Duration `toml:"artifacts"` // finished jobs' artifacts
	Audit     Duration `toml:"audit"`     // audit records
	Interval  Duration `toml:"interval"`  // how often a retention pass runs
	BatchSize int      `toml:"batch_size"`
}

// retentionPeriods are the [retention] keys where 0 means "forever".
var retentionPeriods = []string{"retention.jobs", "retention.logs", "retention.artifacts", "retention.audit"}

// MetricsConfig is [metrics].
type MetricsConfig struct {
	Listen string `toml:"listen"`
}

// Worker is simpletuner-workerd's configuration.
type Worker struct {
	Orchestrator ConnectionConfig `toml:"orchestrator"`
	Worker       WorkerConfig     `toml:"worker"`
	Job          JobConfig        `toml:"job"`
	GPU          GPUConfig        `toml:"gpu"`
	Log          LogConfig        `toml:"log"`

	origins map[string]string // key → where it was set (file:line, variable, flag)
	// tokenInFiles: the token came from a file an admin can rewrite while
	// workerd runs (token_file, the credential, this file), not from the
	// environment or a flag.
	tokenInFiles bool
	// fileUnread: the file could not be read or parsed (see WithRequired).
	fileUnread bool
}

// Origin says where a key's value came from: "file.toml:12", an environment
// variable, a flag, or "" for the built-in default.
func (c *Worker) Origin(key string) string { return c.origins[key] }

// TokenRereadable reports whether loading the configuration again may find
// another token: it came from the token file, the systemd credential or the
// configuration file, not from the environment or a flag.
func (c *Worker) TokenRereadable() bool { return c.tokenInFiles }

// ConnectionConfig is the worker's [orchestrator]; after loading, Token holds
// the secret whatever its source (token, token_file or "worker-token" credential).
type ConnectionConfig struct {
	URL       string `toml:"url"`
	Token     Secret `toml:"token"`
	TokenFile string `toml:"token_file"`
	CAFile    string `toml:"ca_file"`
	// CertFile and KeyFile are the worker's client certificate, for an
	// orchestrator that requires one (mutual TLS). When both are "", the
	// systemd credentials "worker-cert" and "worker-key" are used if present.
	CertFile           string `toml:"cert_file"`
	KeyFile            string `toml:"key_file"`
	InsecureSkipVerify bool   `toml:"insecure_skip_verify"`
}

// WorkerConfig is the worker's [worker].
type WorkerConfig struct {
	Name           string            `toml:"name"` // "" → hostname
	Persistent     bool              `toml:"persistent"`
	Labels         map[string]string `toml:"labels"`
	StateDir       string            `toml:"state_dir"`
	SelfFenceAfter Duration          `toml:"self_fence_after"`
	ReconnectMax   Duration          `toml:"reconnect_max"`
	// DrainTimeout bounds the drain a stop signal starts: running jobs left
	// after it are stopped with their cancel grace and requeued, so that the
	// worker leaves cleanly before the service manager's own stop timeout
	// kills everything.
	DrainTimeout Duration `toml:"drain_timeout"`
	// MaxJobs is how many jobs run at once, each on GPUs of its own; 0 (not
	// set) means one per GPU, or 1 on a machine without GPUs.
	MaxJobs int `toml:"max_jobs"`
}

// JobConfig is the worker's [job].
type JobConfig struct {
	Command     []string          `toml:"command"`
	WorkDir     string            `toml:"work_dir"` // "" → <state_dir>/jobs
	CancelGrace Duration          `toml:"cancel_grace"`
	Env         map[string]string `toml:"env"`
	// PassEnv names more variables of workerd's own environment that jobs
	// inherit, beyond the built-in allowlist: names or glob patterns
	// ("HF_*"). A secret-like name never passes (see SecretLikeName).
	PassEnv       []string `toml:"pass_env"`
	LogLimitBytes int64    `toml:"log_limit_bytes"`
	Isolation     string   `toml:"isolation"` // auto | cgroup | process-group
	User          string   `toml:"user"`      // jobs' groups; "" runs jobs as workerd itself
	UIDRange      string   `toml:"uid_range"` // a uid per running job; "" runs every job as user
	MemoryMax     string   `toml:"memory_max"`
	TasksMax      int64    `toml:"tasks_max"`
	// Checkpoints keeps each job's finished checkpoints in its artifacts
	// and resumes a retry from the newest, for jobs whose orchestrator keeps
	// them; false keeps none and starts retries afresh.
	Checkpoints bool `toml:"checkpoints"`
	// KeepCheckpoints is how many complete checkpoints a job keeps.
	KeepCheckpoints int `toml:"keep_checkpoints"`
	// CheckpointUploadRate bounds what the worker's checkpoint and output
	// uploads read and send together, per second ("" or "0": no bound).
	CheckpointUploadRate string `toml:"checkpoint_upload_rate"`
	// CheckpointScanInterval is how often a running job's output directory
	// is looked at for finished checkpoints.
	CheckpointScanInterval Duration `toml:"checkpoint_scan_interval"`
	// CheckpointWatch also looks as soon as inotify says something appeared
	// in the output directory; false leaves it to the scan.
	CheckpointWatch bool `toml:"checkpoint_watch"`
	// ShutdownCheckpointTimeout bounds the upload of a job's last
	// checkpoint when workerd stops the job because it is itself stopping;
	// the job's requeue waits for it.
	ShutdownCheckpointTimeout Duration `toml:"shutdown_checkpoint_timeout"`
}

// CheckpointUploadBytesPerSecond is checkpoint_upload_rate in bytes per
// second (0: no bound); validation has refused anything ParseBytes cannot
// read.
func (j JobConfig) CheckpointUploadBytesPerSecond() int64 {
	n, _ := ParseBytes(j.CheckpointUploadRate)
	return n
}

// MemoryMaxBytes is memory_max in bytes (0: no limit); validation has
// refused anything ParseBytes cannot read.
func (j JobConfig) MemoryMaxBytes() int64 {
	n, _ := ParseBytes(j.MemoryMax)
	return n
}

// ParseBytes reads a size: a number of bytes, or one with a K, M, G or T
// suffix (powers of 1024; "KiB" and "KB" are read the same). "" is 0.
func ParseBytes(s string) (int64, error) {
	t := strings.TrimSpace(s)
	if t == "" {
		return 0, nil
	}
	u := strings.ToUpper(t)
	u = strings.TrimSuffix(strings.TrimSuffix(u, "B"), "I")
	mult := int64(1)
	if n := len(u); n > 0 {
		if i := strings.IndexByte("KMGT", u[n-1]); i >= 0 {
			mult = int64(1) << (10 * (i + 1))
			u = u[:n-1]
		}
	}
	v, err := strconv.ParseInt(strings.TrimSpace(u), 10, 64)
	if err != nil || v < 0 || v > (1<<62)/mult {
		return 0, fmt.Errorf("invalid size %q (want e.g. \"64G\", \"512M\" or a number of bytes)", s)
	}
	return v * mult, nil
}

// GPUConfig is the worker's [gpu].
type GPUConfig struct {
	Backend string `toml:"backend"` // nvml | static | none
	// Vendor says how jobs are told their GPUs: nvidia (CUDA_VISIBLE_DEVICES
	// and NVIDIA_VISIBLE_DEVICES, UUIDs where known) or amd
	// (ROCR_VISIBLE_DEVICES and HIP_VISIBLE_DEVICES, indices).
	Vendor string `toml:"vendor"`
	// Devices are the GPUs of the static backend, [[gpu.devices]], indexed
	// in order from 0.
	Devices []GPUDeviceConfig `toml:"devices"`
	// WatchInterval is how often workerd reads its GPUs' health, checks the
	// GPUs it holds back for leftover processes, and samples what each job
	// uses of its GPUs (NVML only).
	WatchInterval Duration `toml:"watch_interval"`
}

// GPUDeviceConfig is one [[gpu.devices]] entry of the static backend.
type GPUDeviceConfig struct {
	Name     string  `toml:"name"`
	MemoryGB float64 `toml:"memory_gb"`
	UUID     string  `toml:"uuid"`
	// DeviceNode is the GPU's device file (/dev/nvidia3, /dev/dri/renderD130):
	// with it, a job that was not given the GPU cannot open it.
	DeviceNode string `toml:"device_node"`
}

// Defaults both daemons rely on. Each value is written here once; the
// daemons receive them through a loaded configuration.
const (
	DefaultHeartbeatInterval = 30 * time.Second  // also what workerd assumes of an orchestrator that does not say
	DefaultHeartbeatTimeout  = 120 * time.Second // no heartbeat this long → the worker is offline
	DefaultPingInterval      = 15 * time.Second  // SSE keep-alive; workerd reconnects after 3 silent intervals
	DefaultCancelGrace       = 30 * time.Second  // SIGTERM → SIGKILL
	DefaultLogLimitBytes     = 256 << 20         // per job
	DefaultGPUWatchInterval  = 5 * time.Second   // GPU health, held GPUs, per-job GPU use
	// DefaultKeepCheckpoints keeps the newest checkpoint and the one before
	// it, which a retry falls back to should the newest not restore.
	DefaultKeepCheckpoints = 2
	// DefaultCheckpointUploadRate leaves most of a 10 GbE link and of a
	// disk's bandwidth to the training.
	DefaultCheckpointUploadRate   = "256M"
	DefaultCheckpointScanInterval = 10 * time.Second
	// DefaultShutdownCheckpointTimeout fits the packaged unit: the drain,
	// the cancel grace, this and the final reports stay within
	// TimeoutStopSec=120s (see DefaultDrainTimeout).
	DefaultShutdownCheckpointTimeout = 20 * time.Second
	// DefaultJobUIDRange gives each running job a uid of its own, from a span
	// above the ranges systemd hands out (dynamic users, containers).
	DefaultJobUIDRange = "1879048192-1879113727"
)

// DefaultOrchestrator returns the built-in defaults.
func DefaultOrchestrator() *Orchestrator {
	return &Orchestrator{
		Server: ServerConfig{
			Listen:             []string{"127.0.0.1:8001"},
			AdminSocket:        "/run/simpletuner/orchestratord.sock",
			AdminGroup:         "simpletuner-admin",
			MaxBodyBytes:       1 << 20,
			StreamWriteTimeout: D(30 * time.Second),
			MaxLogFollowers:    8,
			BodyTimeout:        D(30 * time.Second),
		},
		Database: DatabaseConfig{Timeout: D(30 * time.Second)},
		Paths:    PathsConfig{StateDir: "/var/lib/simpletuner", ConfigsDir: "/etc/simpletuner/configs"},
		Workers: WorkersConfig{
			HeartbeatInterval:     D(DefaultHeartbeatInterval),
			HeartbeatTimeout:      D(DefaultHeartbeatTimeout),
			HealthCheckInterval:   D(60 * time.Second),
			StartupGrace:          D(120 * time.Second),
			AckTimeout:            D(60 * time.Second),
			EphemeralCleanupAfter: D(time.Hour),
			PingInterval:          D(DefaultPingInterval),
		},
		Jobs: JobsConfig{
			MaxRetries:          3,
			CancelGrace:         D(DefaultCancelGrace),
			CancelReportTimeout: D(30 * time.Second),
			LogLimitBytes:       DefaultLogLimitBytes,
			SchedulerInterval:   D(5 * time.Second),
			Preemption:          "on",
			MinRuntime:          D(10 * time.Minute),
			UsageHalfLife:       D(7 * day),
		},
		Auth: AuthConfig{
			FailuresPerMinute:    10,
			RecheckInterval:      D(10 * time.Second),
			FailureAuditInterval: D(time.Minute),
			FailureAuditMaxPeers: 100,
			LoginTokenTTL:        D(12 * time.Hour),
			PeopleTokens:         true,
			PersonalTokenMaxTTL:  D(90 * day),
			LDAP:                 defaultLDAP(),
			OIDC:                 defaultOIDC(),
			Groups:               []GroupMapping{},
		},
		Log:     LogConfig{Level: "info", Format: "auto"},
		Metrics: MetricsConfig{Listen: "127.0.0.1:9101"},
		Artifacts: ArtifactsConfig{
			Backend:        "local",
			MaxObjectBytes: 100 << 30,
			MaxJobBytes:    500 << 30,
			MaxJobObjects:  10000,
			ReservePercent: DefaultArtifactReservePercent,
			UploadGrace:    D(15 * time.Minute),
		},
		Retention: RetentionConfig{
			Jobs:      D(365 * day),
			Logs:      D(90 * day),
			Artifacts: D(90 * day),
			Audit:     D(730 * day),
			Interval:  D(time.Hour),
			BatchSize: 500,
		},
		WebhookDelivery: defaultWebhookDelivery(),
	}
}

// DefaultDrainTimeout fits the packaged unit: 60 s of drain, the default
// 30 s cancel grace, 20 s for the last checkpoint's upload and the final
// reports stay within TimeoutStopSec=120s.
const DefaultDrainTimeout = 60 * time.Second

// DefaultWorker returns the built-in defaults; note persistent is false here
// while the packaged workerd.toml sets it to true.
func DefaultWorker() *Worker {
	return &Worker{
		Orchestrator: ConnectionConfig{TokenFile: DefaultWorkerTokenFile},
		Worker: WorkerConfig{
			Labels:         map[string]string{},
			StateDir:       "/var/lib/simpletuner-worker",
			SelfFenceAfter: D(90 * time.Second),
			ReconnectMax:   D(60 * time.Second),
			DrainTimeout:   D(DefaultDrainTimeout),
		},
		Job: JobConfig{
			Command:       []string{"python3", "-m", "simpletuner.train"},
			CancelGrace:   D(DefaultCancelGrace),
			Env:           map[string]string{},
			PassEnv:       []string{},
			LogLimitBytes: DefaultLogLimitBytes,
			Isolation:     "auto",
			User:          "simpletuner-job",
			UIDRange:      DefaultJobUIDRange,

			Checkpoints:            true,
			KeepCheckpoints:        DefaultKeepCheckpoints,
			CheckpointUploadRate:   DefaultCheckpointUploadRate,
			CheckpointScanInterval: D(DefaultCheckpointScanInterval),
			CheckpointWatch:        true,

			ShutdownCheckpointTimeout: D(DefaultShutdownCheckpointTimeout),
		},
		GPU: GPUConfig{Backend: "nvml", Vendor: "nvidia", WatchInterval: D(DefaultGPUWatchInterval)},
		Log: LogConfig{Level: "info", Format: "auto"},
	}
}

// Error is one configuration problem. Where is "file.toml:LINE", an
// environment variable, a flag ("--port"), or "" for built-in defaults.
type Error struct {
	Where string
	Key   string
	Msg   string
}

func (e *Error) Error() string {
	var b strings.Builder
	if e.Where != "" {
		b.WriteString(e.Where + ": ")
	}
	if e.Key != "" {
		b.WriteString("key " + e.Key + ": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// Errors is every problem found, printed one per line.
type Errors []error

func (es Errors) Error() string {
	lines := make([]string, len(es))
	for i, e := range es {
		lines[i] = e.Error()
	}
	return strings.Join(lines, "\n")
}

// Unwrap lets errors.Is/As look at each problem.
func (es Errors) Unwrap() []error { return es }

// asErrors turns a problem list into an error, nil when empty.
func asErrors(es []error) error {
	if len(es) == 0 {
		return nil
	}
	return Errors(es)
}
