// Package adminapi is the orchestrator's admin and queue API: the typed
// methods behind /api/admin, /api/queue, /api/auth and /api/configs, which
// check their caller's scope and audit what they change, and the routes that
// serve them over HTTP. The dashboard calls the same methods in process.
//
// What only the running orchestrator can do (authenticate a credential,
// drain a worker, cancel a job, wake the scheduler) each handler group asks
// of the part that does it, through a role-sized interface (Deps);
// everything else it reads from the store.
package adminapi

import (
	"context"
	"log/slog"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/api"
	"github.com/simpletuner/simpletuner-orchestration/internal/approval"
	"github.com/simpletuner/simpletuner-orchestration/internal/artifacts"
	"github.com/simpletuner/simpletuner-orchestration/internal/auth"
	"github.com/simpletuner/simpletuner-orchestration/internal/config"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator/fairshare"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator/gpuhistory"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator/liveness"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator/logfeed"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator/placement"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator/web"
	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
	"github.com/simpletuner/simpletuner-orchestration/internal/store"
	"github.com/simpletuner/simpletuner-orchestration/internal/webhook"
)

// What only the running orchestrator can do, each handler group asks of
// the part that does it, through an interface no larger than its need.

// Authenticator says who a request's caller is (package authn): every call
// authenticates, the log follower checks again, the dashboard signs in.
type Authenticator interface {
	// Authenticate returns the admin caller of r (its token, or the admin
	// socket's peer), counting and auditing failures; with no credential
	// it sets the WWW-Authenticate header of w for the 401.
	Authenticate(w http.ResponseWriter, r *http.Request) (auth.Principal, error)
	// AdminByToken authenticates an admin token a request carries outside
	// its headers (the dashboard's sign-in form), as Authenticate would.
	AdminByToken(r *http.Request, token, route string) (auth.Principal, error)
	// PasswordLimited and PasswordRefused count a password sign-in (the
	// dashboard's LDAP form) with the client's failed credentials:
	// PasswordLimited refuses a client over the limit (429),
	// PasswordRefused counts and audits one wrong password.
	PasswordLimited(r *http.Request, route string) error
	PasswordRefused(r *http.Request, route string) error
	// StillAllowed checks again, for a long-lived reply, that r's
	// credential still grants scope, and returns the caller as it is now.
	StillAllowed(ctx context.Context, r *http.Request, p auth.Principal, scope string) (auth.Principal, bool, error)
	// TokenPrincipal is the caller a valid admin token stands for: itself,
	// or the person it belongs to as they are now (identity.ErrDisabled
	// when disabled).
	TokenPrincipal(ctx context.Context, t store.AdminToken) (auth.Principal, error)
}

// ErrorWriter answers a failed call as the protocol's error reply
// (web.Errors); APIError is that reply for a caller in process.
type ErrorWriter interface {
	Write(w http.ResponseWriter, r *http.Request, err error)
	APIError(err error, what string) *api.Error
}

// Scheduler is what the worker calls and the waiting reasons ask of this
// instance's scheduler (package scheduler).
type Scheduler interface {
	// Wake asks for a pass.
	Wake()
	// Reservation is the worker held for a job that found no room.
	Reservation() placement.Reservation
}

// Events reach workers' streams and other replicas' schedulers, wherever
// they are served (transitions.Notifier).
type Events interface {
	// WakeSchedulers asks every replica's scheduler for a pass.
	WakeSchedulers()
	SendToWorker(workerID, typ string, v any)
	CloseWorkerStream(workerID, reason string)
}

// JobControl is the job move the queue calls ask for (transitions.Mover).
type JobControl interface {
	// RequestCancel cancels a job, or asks its worker to stop it.
	RequestCancel(ctx context.Context, jobID, actor, ip string) (store.Job, error)
}

// WorkerControl is what the worker calls ask of the worker protocol
// (package rpc).
type WorkerControl interface {
	// Drain and Resume stop and restart handing jobs to a worker; Evict
	// ends a worker's stream and its running attempts; Deletable says why
	// a worker may not be deleted yet.
	Drain(ctx context.Context, id, actor, ip string) (store.Worker, error)
	Resume(ctx context.Context, id, actor, ip string) (store.Worker, error)
	Evict(ctx context.Context, wk store.Worker, actor, ip string) error
	Deletable(ctx context.Context, wk store.Worker) error
	// Shown is a worker's status as the API shows it, and whether its
	// stream is open.
	Shown(wk store.Worker) (status protocol.WorkerStatus, connected bool)
	// LargestWorker is the most GPUs any worker has.
	LargestWorker() int
}

// Uploads are what jobs stored (package rpc): the artifact calls and a
// job's view ask for them.
type Uploads interface {
	// ArtifactStore is the store of job uploads; an error when none is set.
	ArtifactStore() (*artifacts.Store, error)
	// LatestCheckpoint is a job's newest complete checkpoint and how many
	// it keeps.
	LatestCheckpoint(ctx context.Context, j store.Job) (*protocol.Checkpoint, int, error)
}

// Deps are the parts of the orchestrator the API reads.
type Deps struct {
	Auth      Authenticator
	Errors    ErrorWriter
	Scheduler Scheduler
	Events    Events
	Jobs      JobControl
	Workers   WorkerControl
	Uploads   Uploads
	// Stopping is closed when the orchestrator begins to shut down.
	Stopping <-chan struct{}

	Store      Store
	Log        *slog.Logger
	Heard      *liveness.Memory
	GPUHistory *gpuhistory.History
	Webhooks   *webhook.Service
	LogFeed    *logfeed.Feed
}

// Options are the API's settings; the orchestrator replaces them on reload.
type Options struct {
	// MaxBodyBytes bounds a request body; ConfigsDir holds the named job
	// configurations; MaxRetries is how many attempts a job gets.
	MaxBodyBytes int64
	ConfigsDir   string
	MaxRetries   int
	// PublicURL and AdminSocketPath are the orchestrator's addresses in the
	// connection commands of new worker tokens.
	PublicURL       string
	AdminSocketPath string
	// MaxLogFollowers is how many logs one credential may follow at once;
	// StreamWriteTimeout bounds each write to a follower; RecheckInterval
	// is how often a follower's credential is checked again;
	// FollowFallback how often a follower reads the store without news
	// (0: defaultFollowFallback).
	MaxLogFollowers    int
	StreamWriteTimeout time.Duration
	RecheckInterval    time.Duration
	FollowFallback     time.Duration
	// Teams are the teams sharing the fleet: a token's team must be one,
	// and a submit is held to its team's limits.
	Teams fairshare.Policy
	// Visibility is whose jobs a token reads: "team", "all" (reads only),
	// or "" (team when teams are configured, else all).
	Visibility string
	// Groups are [[auth.groups]]: what the people's provider groups grant.
	Groups []config.GroupMapping
	// LoginTokenTTL is how long a command-line login lasts; CLIClientID
	// the OpenID provider's client it signs in with ("" none).
	LoginTokenTTL time.Duration
	CLIClientID   string
	// OIDCScopes are [auth.oidc] scopes, which the command line asks for too.
	OIDCScopes []string
	// PeopleTokens lets people create tokens of their own, lasting at
	// most PersonalTokenMaxTTL.
	PeopleTokens        bool
	PersonalTokenMaxTTL time.Duration
	// ApprovalRules are [[approval_rules]], checked at submit before the
	// rules made through the API.
	ApprovalRules []approval.Rule
}

// API is the admin and queue API.
type API struct {
	auth       Authenticator
	errors     ErrorWriter
	scheduler  Scheduler
	events     Events
	jobs       JobControl
	workers    WorkerControl
	uploads    Uploads
	stopped    <-chan struct{}
	store      Store
	log        *slog.Logger
	heard      *liveness.Memory
	gpuHistory *gpuhistory.History
	webhooks   *webhook.Service
	logFeed    *logfeed.Feed
	opt        atomic.Pointer[Options]
	// followers counts open log-follow streams per caller.
	followers followers
	// recent holds the last full count of the jobs that ended lately.
	recent recentEnds
	// providers are the identity providers people sign in with.
	providers providersBox
}

// New is the API over deps, with opt as the orchestrator fills it: its
// defaults applied (a zero write timeout or follower cap is not one).
func New(deps Deps, opt Options) *API {
	a := &API{auth: deps.Auth, errors: deps.Errors, scheduler: deps.Scheduler, events: deps.Events, jobs: deps.Jobs,
		workers: deps.Workers, uploads: deps.Uploads, stopped: deps.Stopping, store: deps.Store, log: deps.Log, heard: deps.Heard,
		gpuHistory: deps.GPUHistory, webhooks: deps.Webhooks, logFeed: deps.LogFeed}
	a.opt.Store(&opt)
	return a
}

// SetOptions replaces the settings.
func (a *API) SetOptions(o Options) { a.opt.Store(&o) }

func (a *API) options() Options { return *a.opt.Load() }

// stopping reports whether the orchestrator is shutting down.
func (a *API) stopping() bool {
	select {
	case <-a.stopped:
		return true
	default:
		return false
	}
}

// readJSON reads a JSON object body into v (web.ReadJSON within the body limit).
func (a *API) readJSON(w http.ResponseWriter, r *http.Request, v any) error {
	_, err := web.ReadJSON(w, r, a.options().MaxBodyBytes, v)
	return err
}

// AdminByToken authenticates an admin token a request carries outside its
// headers (the dashboard's sign-in form): failures count and are audited
// under route like those of the API's.
func (a *API) AdminByToken(r *http.Request, token, route string) (auth.Principal, error) {
	return a.auth.AdminByToken(r, token, route)
}

// PasswordLimited refuses a password sign-in from a client that failed too
// often (see Authenticator).
func (a *API) PasswordLimited(r *http.Request, route string) error {
	return a.auth.PasswordLimited(r, route)
}

// PasswordRefused counts and audits a wrong password of a sign-in under route.
func (a *API) PasswordRefused(r *http.Request, route string) error {
	return a.auth.PasswordRefused(r, route)
}

// TokenPrincipal is the caller a valid admin token stands for (the
// dashboard's session reads it on every request).
func (a *API) TokenPrincipal(ctx context.Context, t store.AdminToken) (auth.Principal, error) {
	return a.auth.TokenPrincipal(ctx, t)
}

// APIError is what a call that failed with err answers (see
// ErrorWriter.APIError); what names the call in the log.
func (a *API) APIError(err error, what string) *api.Error { return a.errors.APIError(err, what) }
