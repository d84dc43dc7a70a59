package orchestrator

import (
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/approval"
	"github.com/simpletuner/simpletuner-orchestration/internal/config"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator/adminapi"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator/authn"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator/fairshare"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator/retention"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator/rpc"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator/scheduler"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator/transitions"
	"github.com/simpletuner/simpletuner-orchestration/internal/version"
	"github.com/simpletuner/simpletuner-orchestration/internal/webhook"
)

// Options are the orchestrator's settings. OptionsFrom fills them from the
// configuration, whose defaults are the only built-in values.
type Options struct {
	InstanceID            string
	MaxBodyBytes          int64
	AdminGroup            string
	ConfigsDir            string
	HeartbeatInterval     time.Duration
	HeartbeatTimeout      time.Duration
	HealthCheckInterval   time.Duration
	StartupGrace          time.Duration
	AckTimeout            time.Duration
	EphemeralCleanupAfter time.Duration
	PingInterval          time.Duration
	SchedulerInterval     time.Duration
	MaxRetries            int
	CancelGrace           time.Duration
	CancelReportTimeout   time.Duration
	LogLimitBytes         int64
	AuthFailuresPerMinute int
	// Artifacts: limits per object and per job, and how long an attempt's
	// upload token still works after the attempt ended.
	ArtifactMaxObjectBytes int64
	ArtifactMaxJobBytes    int64
	ArtifactMaxJobObjects  int
	ArtifactReservePercent float64
	ArtifactUploadGrace    time.Duration
	StreamWriteTimeout     time.Duration
	BodyTimeout            time.Duration
	// PublicURL is the orchestrator's address as clients know it (a TLS
	// proxy in front); "" uses the address a request came in on.
	PublicURL            string
	MaxLogFollowers      int
	RecheckInterval      time.Duration
	FailureAuditInterval time.Duration
	FailureAuditMaxPeers int
	// Retention: how long finished jobs and their traces are kept.
	Retention retention.Options
	// Webhooks: how events reach the webhook subscriptions, and those of
	// the configuration.
	Webhooks webhook.Options
	// Teams: the teams sharing the fleet, and preemption.
	Teams fairshare.Policy
	// Visibility is [auth] visibility: whose jobs a token reads.
	Visibility string
	// Groups are [[auth.groups]]: what people's provider groups grant.
	Groups []config.GroupMapping
	// LoginTokenTTL, CLIClientID, PeopleTokens and PersonalTokenMaxTTL
	// shape people's command-line logins and tokens ([auth]).
	LoginTokenTTL       time.Duration
	CLIClientID         string
	OIDCScopes          []string
	PeopleTokens        bool
	PersonalTokenMaxTTL time.Duration
	// ApprovalRules are [[approval_rules]].
	ApprovalRules []approval.Rule

	// followFallback replaces defaultFollowFallback when set: tests that
	// count store reads put the fallback look out of their way.
	followFallback time.Duration
	// fleetHistoryEvery replaces the minute between two counts of the
	// fleet's GPUs for the charts (tests).
	fleetHistoryEvery time.Duration
}

// OptionsFrom maps a loaded configuration onto the orchestrator's settings.
// An unset instance id becomes hostname:pid, unique per process.
func OptionsFrom(cfg *config.Orchestrator) Options {
	id := cfg.Server.InstanceID
	if id == "" {
		host, _ := os.Hostname()
		id = fmt.Sprintf("%s:%d", host, os.Getpid())
	}
	w, j := cfg.Workers, cfg.Jobs
	return Options{
		InstanceID:            id,
		MaxBodyBytes:          cfg.Server.MaxBodyBytes,
		AdminGroup:            cfg.Server.AdminGroup,
		ConfigsDir:            cfg.Paths.ConfigsDir,
		HeartbeatInterval:     w.HeartbeatInterval.Duration,
		HeartbeatTimeout:      w.HeartbeatTimeout.Duration,
		HealthCheckInterval:   w.HealthCheckInterval.Duration,
		StartupGrace:          w.StartupGrace.Duration,
		AckTimeout:            w.AckTimeout.Duration,
		EphemeralCleanupAfter: w.EphemeralCleanupAfter.Duration,
		PingInterval:          w.PingInterval.Duration,
		SchedulerInterval:     j.SchedulerInterval.Duration,
		MaxRetries:            j.MaxRetries,
		CancelGrace:           j.CancelGrace.Duration,
		CancelReportTimeout:   j.CancelReportTimeout.Duration,
		LogLimitBytes:         j.LogLimitBytes,
		AuthFailuresPerMinute: cfg.Auth.FailuresPerMinute,

		ArtifactMaxObjectBytes: cfg.Artifacts.MaxObjectBytes,
		ArtifactMaxJobBytes:    cfg.Artifacts.MaxJobBytes,
		ArtifactMaxJobObjects:  cfg.Artifacts.MaxJobObjects,
		ArtifactReservePercent: cfg.Artifacts.ReservePercent,
		ArtifactUploadGrace:    cfg.Artifacts.UploadGrace.Duration,
		StreamWriteTimeout:     cfg.Server.StreamWriteTimeout.Duration,
		BodyTimeout:            cfg.Server.BodyTimeout.Duration,
		PublicURL:              strings.TrimSuffix(cfg.Server.PublicURL, "/"),
		MaxLogFollowers:        cfg.Server.MaxLogFollowers,
		RecheckInterval:        cfg.Auth.RecheckInterval.Duration,
		FailureAuditInterval:   cfg.Auth.FailureAuditInterval.Duration,
		FailureAuditMaxPeers:   cfg.Auth.FailureAuditMaxPeers,

		Retention:  retention.OptionsFrom(cfg.Retention),
		Webhooks:   webhook.OptionsFrom(cfg),
		Teams:      fairshare.PolicyFrom(cfg),
		Visibility: cfg.Auth.Visibility,
		Groups:     cfg.Auth.Groups,

		LoginTokenTTL:       cfg.Auth.LoginTokenTTL.Duration,
		CLIClientID:         cfg.Auth.OIDC.CLIClientID,
		OIDCScopes:          cfg.Auth.OIDC.Scopes,
		PeopleTokens:        cfg.Auth.PeopleTokens,
		PersonalTokenMaxTTL: cfg.Auth.PersonalTokenMaxTTL.Duration,
		ApprovalRules:       approvalRulesFrom(cfg.ApprovalRules),
	}
}

// approvalRulesFrom is [[approval_rules]] as the approval package reads it.
func approvalRulesFrom(entries []config.ApprovalRuleConfig) []approval.Rule {
	out := make([]approval.Rule, 0, len(entries))
	for _, e := range entries {
		out = append(out, e.Rule())
	}
	return out
}

// withDefaults fills the settings this file's loops and streams cannot do
// without (a zero ticker period panics, a zero cap refuses everyone) from the
// configuration's defaults, for Options built by hand.
func (o Options) withDefaults() Options {
	def := OptionsFrom(config.DefaultOrchestrator())
	if o.StreamWriteTimeout <= 0 {
		o.StreamWriteTimeout = def.StreamWriteTimeout
	}
	if o.MaxLogFollowers <= 0 {
		o.MaxLogFollowers = def.MaxLogFollowers
	}
	if o.BodyTimeout <= 0 {
		o.BodyTimeout = def.BodyTimeout
	}
	if o.RecheckInterval <= 0 {
		o.RecheckInterval = def.RecheckInterval
	}
	if o.FailureAuditInterval <= 0 {
		o.FailureAuditInterval = def.FailureAuditInterval
	}
	if o.FailureAuditMaxPeers <= 0 {
		o.FailureAuditMaxPeers = def.FailureAuditMaxPeers
	}
	// The retention loop waits Interval between passes: zero would spin.
	if o.Retention.Interval <= 0 {
		o.Retention.Interval = def.Retention.Interval
	}
	if o.Retention.BatchSize <= 0 {
		o.Retention.BatchSize = def.Retention.BatchSize
	}
	if len(o.Teams.Teams) == 0 {
		o.Teams = def.Teams
	}
	if o.LoginTokenTTL <= 0 {
		o.LoginTokenTTL = def.LoginTokenTTL
	}
	if o.PersonalTokenMaxTTL <= 0 {
		o.PersonalTokenMaxTTL = def.PersonalTokenMaxTTL
	}
	return o
}

// protocolOptions are the worker protocol's settings among the Server's.
func (o Options) protocolOptions() rpc.Options {
	return rpc.Options{InstanceID: o.InstanceID, MaxBodyBytes: o.MaxBodyBytes, HeartbeatInterval: o.HeartbeatInterval,
		HeartbeatTimeout: o.HeartbeatTimeout, PingInterval: o.PingInterval, StreamWriteTimeout: o.StreamWriteTimeout,
		HealthCheckInterval: o.HealthCheckInterval, StartupGrace: o.StartupGrace, EphemeralCleanupAfter: o.EphemeralCleanupAfter,
		LogLimitBytes: o.LogLimitBytes, RecheckInterval: o.RecheckInterval, ArtifactUploadGrace: o.ArtifactUploadGrace}
}

// moveOptions are the job moves' settings among the Server's.
func (o Options) moveOptions() transitions.Options {
	return transitions.Options{CancelGrace: o.CancelGrace, CancelReportTimeout: o.CancelReportTimeout}
}

// authnOptions are authentication's settings among the Server's.
func (o Options) authnOptions() authn.Options {
	return authn.Options{AdminGroup: o.AdminGroup, FailureAuditInterval: o.FailureAuditInterval, FailureAuditMaxPeers: o.FailureAuditMaxPeers}
}

// schedulerOptions are the scheduler's settings among the Server's.
func (o Options) schedulerOptions() scheduler.Options {
	return scheduler.Options{Interval: o.SchedulerInterval, AckTimeout: o.AckTimeout, CancelGrace: o.CancelGrace, Teams: o.Teams}
}

// webhookOptions are the webhook delivery's settings, with this instance's
// name for the leases it takes.
func (o Options) webhookOptions() webhook.Options {
	w := o.Webhooks
	w.InstanceID = o.InstanceID
	w.UserAgent = "simpletuner-orchestratord/" + version.Version
	w.BaseURL = o.PublicURL
	return w
}

// apiOptions are the admin API's settings among the Server's.
func (o Options) apiOptions(adminSocketPath string) adminapi.Options {
	return adminapi.Options{
		MaxBodyBytes: o.MaxBodyBytes, ConfigsDir: o.ConfigsDir, PublicURL: o.PublicURL,
		AdminSocketPath: adminSocketPath, MaxRetries: o.MaxRetries,
		MaxLogFollowers: o.MaxLogFollowers, StreamWriteTimeout: o.StreamWriteTimeout, RecheckInterval: o.RecheckInterval,
		FollowFallback: o.followFallback, Teams: o.Teams, Visibility: o.Visibility, Groups: o.Groups,
		LoginTokenTTL: o.LoginTokenTTL, CLIClientID: o.CLIClientID, OIDCScopes: o.OIDCScopes, PeopleTokens: o.PeopleTokens,
		PersonalTokenMaxTTL: o.PersonalTokenMaxTTL,
		ApprovalRules:       o.ApprovalRules,
	}
}
