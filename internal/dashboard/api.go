package dashboard

import (
	"context"
	"io"
	"math"
	"net/http"
	"regexp"

	"github.com/simpletuner/simpletuner-orchestration/internal/api"
	"github.com/simpletuner/simpletuner-orchestration/internal/auth"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator/adminapi"
	"github.com/simpletuner/simpletuner-orchestration/internal/store"
	"github.com/simpletuner/simpletuner-orchestration/internal/webhook/spec"
)

// API is what the dashboard calls of the orchestrator.
type API interface {
	CallerOf(r *http.Request, p auth.Principal) adminapi.Caller
	APIError(err error, what string) *api.Error

	Stats(ctx context.Context, history bool) (api.Stats, error)
	FleetGPUHistory(ctx context.Context, _ struct{}) (api.FleetHistory, error)
	Workers(ctx context.Context, q api.WorkersQuery) (api.WorkerList, error)
	Worker(ctx context.Context, ref api.WorkerRef) (api.Worker, error)
	WorkerGPUHistory(ctx context.Context, ref api.WorkerRef) (api.GPUHistory, error)
	CreateWorker(ctx context.Context, req api.CreateWorker) (api.WorkerCreated, error)
	PatchWorker(ctx context.Context, id string, req api.PatchWorker) (api.Worker, error)
	DrainWorker(ctx context.Context, ref api.WorkerRef) (api.WorkerAction, error)
	ResumeWorker(ctx context.Context, ref api.WorkerRef) (api.WorkerAction, error)
	DeleteWorker(ctx context.Context, ref api.WorkerRef) (api.WorkerAction, error)
	RotateWorkerToken(ctx context.Context, ref api.WorkerRef) (api.WorkerToken, error)
	ClearGPU(ctx context.Context, ref api.WorkerRef) (api.WorkerAction, error)
	Jobs(ctx context.Context, q api.JobsQuery) (api.JobList, error)
	Job(ctx context.Context, ref api.JobRef) (api.Job, error)
	Configs(ctx context.Context, _ struct{}) (api.ConfigList, error)
	Submit(ctx context.Context, req api.Submit) (api.Submitted, error)
	CancelJob(ctx context.Context, ref api.JobRef) (api.JobAction, error)
	Approve(ctx context.Context, d api.ApprovalDecision) (api.ApprovalDecided, error)
	Reject(ctx context.Context, d api.ApprovalDecision) (api.ApprovalDecided, error)
	Audit(ctx context.Context, q api.AuditQuery) (api.AuditPage, error)
	VerifyAudit(ctx context.Context, _ struct{}) (api.AuditVerdict, error)
	WriteJobLog(ctx context.Context, id string, w io.Writer) error
	Webhooks(ctx context.Context, _ struct{}) (api.WebhookList, error)
	CreateWebhook(ctx context.Context, req spec.CreateRequest) (spec.Created, error)
	Webhook(ctx context.Context, ref api.WebhookRef) (spec.Subscription, error)
	DeleteWebhook(ctx context.Context, ref api.WebhookRef) (api.WebhookDeleted, error)
	WebhookDeliveries(ctx context.Context, q api.DeliveriesQuery) (api.DeliveryPage, error)
	Usage(ctx context.Context, q api.UsageQuery) (api.Usage, error)
	AdminByToken(r *http.Request, token, route string) (auth.Principal, error)
	PasswordLimited(r *http.Request, route string) error
	PasswordRefused(r *http.Request, route string) error
	TokenPrincipal(ctx context.Context, t store.AdminToken) (auth.Principal, error)
}

// as is r's context carrying the session's caller.
func (d *Dashboard) as(r *http.Request, s *session) context.Context {
	return adminapi.WithCaller(r.Context(), d.opt.API.CallerOf(r, s.principal))
}

// failure is how the pages show a call's error; what names the call in the
// orchestrator's log when the error is not a refusal.
func (d *Dashboard) failure(err error, what string) *apiResult {
	ae := d.opt.API.APIError(err, "dashboard: "+what)
	return &apiResult{Status: ae.Status, Detail: ae.Body.Detail, Code: ae.Body.Error,
		RetryAfterSeconds: int(math.Ceil(ae.RetryAfter.Seconds()))}
}

// apiResult is how a failed call of the orchestrator API reads on a page:
// its status and what the refusal says.
type apiResult struct {
	Status int
	// Detail and Code come from the error body ({"detail", "error"}).
	Detail string
	Code   string
	// RetryAfterSeconds is when a refused caller may try again.
	RetryAfterSeconds int
}

// fieldPattern finds the request field an API error names.
// ("events[1]" names the field events).
var fieldPattern = regexp.MustCompile(`(?:field|query parameter) "([a-z_]+)(?:\[\d+\])?"`)

// Field is the request field the error names, or "".
func (a apiResult) Field() string {
	if m := fieldPattern.FindStringSubmatch(a.Detail); m != nil {
		return m[1]
	}
	return ""
}

// tailBuffer keeps about the last keep bytes written to it: a job's log can
// be hundreds of megabytes and the page shows its end.
type tailBuffer struct {
	keep int
	buf  []byte
	cut  bool // something before the kept bytes was dropped
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.buf = append(t.buf, p...)
	if len(t.buf) > 2*t.keep {
		t.buf = append(t.buf[:0], t.buf[len(t.buf)-t.keep:]...)
		t.cut = true
	}
	return len(p), nil
}

// tail is the last keep bytes, and whether anything came before them.
func (t *tailBuffer) tail() ([]byte, bool) {
	if len(t.buf) > t.keep {
		return t.buf[len(t.buf)-t.keep:], true
	}
	return t.buf, t.cut
}
