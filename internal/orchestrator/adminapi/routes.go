package adminapi

import (
	"context"
	"net/http"
	"slices"

	"github.com/julienschmidt/httprouter"

	"github.com/simpletuner/simpletuner-orchestration/internal/api"
	"github.com/simpletuner/simpletuner-orchestration/internal/auth"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator/web"
	"github.com/simpletuner/simpletuner-orchestration/internal/webhook/spec"
)

// Routes lists the admin and queue endpoints.
func (a *API) Routes() []web.Route {
	// httprouter cannot hold /api/queue/submit beside /api/queue/:job_id, so
	// the fixed names are picked out of the parameter.
	submit := httpCall(a, auth.ScopeQueueSubmit, http.StatusCreated, a.parseSubmit, a.submitHTTP)
	stats := httpCall(a, auth.ScopeQueueView, http.StatusOK, statsQuery, a.Stats)
	getJob := httpCall(a, auth.ScopeQueueView, http.StatusOK, jobRef, a.Job)
	ok, workers, hooks := http.StatusOK, auth.ScopeAdminWorkers, auth.ScopeAdminWebhooks
	postQueue := func(w http.ResponseWriter, req *http.Request, ps httprouter.Params) {
		if ps.ByName("job_id") != "submit" {
			a.errors.Write(w, req, web.Errorf(http.StatusMethodNotAllowed, "method_not_allowed", "POST is not allowed on %s", req.URL.Path))
			return
		}
		submit(w, req, ps)
	}
	getQueue := func(w http.ResponseWriter, req *http.Request, ps httprouter.Params) {
		if ps.ByName("job_id") == "stats" {
			stats(w, req, ps)
			return
		}
		getJob(w, req, ps)
	}
	return append([]web.Route{
		web.NewRoute("GET", "/api/admin/workers", "", httpCall(a, workers, ok, workersQuery, a.Workers)),
		web.NewRoute("POST", "/api/admin/workers", "", httpCall(a, workers, http.StatusCreated, jsonBody[api.CreateWorker](a), a.CreateWorker)),
		web.NewRoute("GET", "/api/admin/workers/:id", "", httpCall(a, workers, ok, workerRef, a.Worker)),
		web.NewRoute("PATCH", "/api/admin/workers/:id", "", httpCall(a, workers, ok, a.parsePatchWorker,
			func(ctx context.Context, r patchWorkerRequest) (api.Worker, error) {
				return a.PatchWorker(ctx, r.ID, r.PatchWorker)
			})),
		web.NewRoute("DELETE", "/api/admin/workers/:id", "", httpCall(a, workers, ok, deleteWorkerRef, a.DeleteWorker)),
		web.NewRoute("POST", "/api/admin/workers/:id/drain", "", httpCall(a, workers, ok, workerRef, a.DrainWorker)),
		web.NewRoute("POST", "/api/admin/workers/:id/resume", "", httpCall(a, workers, ok, workerRef, a.ResumeWorker)),
		web.NewRoute("POST", "/api/admin/workers/:id/token", "", httpCall(a, workers, ok, workerRef, a.RotateWorkerToken)),
		web.NewRoute("POST", "/api/admin/workers/:id/gpus/:index/clear", "", httpCall(a, workers, ok, gpuRef, a.ClearGPU)),
		web.NewRoute("GET", "/api/admin/workers/:id/gpu-history", "", httpCall(a, workers, ok, workerRef, a.WorkerGPUHistory)),
		web.NewRoute("GET", "/api/admin/fleet/gpu-history", "", httpCall(a, auth.ScopeQueueView, ok, noRequest, a.FleetGPUHistory)),
		web.NewRoute("GET", "/api/admin/usage", "", httpCall(a, auth.ScopeQueueView, ok, usageQuery, a.Usage)),
		web.NewRoute("GET", "/api/admin/audit", "", httpCall(a, auth.ScopeAdminAudit, ok, auditQuery, a.Audit)),
		web.NewRoute("GET", "/api/admin/audit/verify", "", httpCall(a, auth.ScopeAdminAudit, ok, noRequest, a.VerifyAudit)),
		web.NewRoute("GET", "/api/admin/webhooks", "", httpCall(a, hooks, ok, noRequest, a.Webhooks)),
		web.NewRoute("POST", "/api/admin/webhooks", "", httpCall(a, hooks, http.StatusCreated, jsonBody[spec.CreateRequest](a), a.CreateWebhook)),
		web.NewRoute("GET", "/api/admin/webhooks/:id", "", httpCall(a, hooks, ok, webhookRef, a.Webhook)),
		web.NewRoute("DELETE", "/api/admin/webhooks/:id", "", httpCall(a, hooks, ok, webhookRef, a.DeleteWebhook)),
		web.NewRoute("GET", "/api/admin/webhooks/:id/deliveries", "", httpCall(a, hooks, ok, deliveriesQuery, a.WebhookDeliveries)),
		web.NewRoute("GET", "/api/auth/whoami", "", httpCall(a, scopeAnyCaller, ok, noRequest, a.Whoami)),
		web.NewRoute("GET", "/api/configs", "", httpCall(a, auth.ScopeQueueSubmit, ok, noRequest, a.Configs)),
		web.NewRoute("GET", "/api/admin/tokens", "", httpCall(a, auth.ScopeAll, ok, noRequest, a.Tokens)),
		web.NewRoute("POST", "/api/admin/tokens", "", httpCall(a, auth.ScopeAll, http.StatusCreated, jsonBody[api.CreateToken](a), a.CreateToken)),
		web.NewRoute("DELETE", "/api/admin/tokens/:id", "", httpCall(a, auth.ScopeAll, ok, tokenRef, a.RevokeToken)),

		// Queue.
		web.NewRoute("POST", "/api/queue/:job_id", "POST /api/queue/submit", postQueue),
		web.NewRoute("GET", "/api/queue/:job_id", "GET /api/queue/{job_id}", getQueue),
		web.NewRoute("GET", "/api/queue", "", httpCall(a, auth.ScopeQueueView, ok, jobsQuery, a.Jobs)),
		web.NewRoute("POST", "/api/queue/:job_id/cancel", "", httpCall(a, auth.ScopeQueueCancel, ok, jobRef, a.CancelJob)),
		web.NewRoute("GET", "/api/queue/:job_id/logs", "", a.admin(auth.ScopeQueueView, a.readLogs)),
		web.NewRoute("GET", "/api/queue/:job_id/artifacts", "", httpCall(a, auth.ScopeQueueView, ok, artifactsQuery, a.Artifacts)),
		web.NewRoute("GET", "/api/queue/:job_id/artifacts/*path", "GET /api/queue/{job_id}/artifacts/{path}", a.admin(auth.ScopeQueueView, a.downloadArtifact)),
		web.NewRoute("HEAD", "/api/queue/:job_id/artifacts/*path", "HEAD /api/queue/{job_id}/artifacts/{path}", a.admin(auth.ScopeQueueView, a.downloadArtifact)),
	}, slices.Concat(a.peopleRoutes(), a.signInRoutes(), a.approvalRoutes())...)
}
