package adminapi

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/julienschmidt/httprouter"

	"github.com/simpletuner/simpletuner-orchestration/internal/api"
	"github.com/simpletuner/simpletuner-orchestration/internal/audit"
	"github.com/simpletuner/simpletuner-orchestration/internal/auth"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator/authn"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator/labels"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator/web"
	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
	"github.com/simpletuner/simpletuner-orchestration/internal/store"
)

// queryInt parses an optional integer query parameter within [lo, hi].
func queryInt(r *http.Request, name string, def, lo, hi int) (int, error) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < lo || n > hi {
		return 0, web.Invalid("query parameter %q must be an integer from %d to %d", name, lo, hi)
	}
	return n, nil
}

// page reads the limit (default def, at most max) and offset query parameters.
func page(r *http.Request, def, max int) (limit, offset int, err error) {
	if limit, err = queryInt(r, "limit", def, 1, max); err != nil {
		return 0, 0, err
	}
	offset, err = queryInt(r, "offset", 0, 0, 1<<30)
	return limit, offset, err
}

// adminWorker authorizes a call of the workers scope and loads the worker
// it names (404 when there is none).
func (a *API) adminWorker(ctx context.Context, id string) (Caller, store.Worker, error) {
	c, err := authorize(ctx, auth.ScopeAdminWorkers)
	if err != nil {
		return Caller{}, store.Worker{}, err
	}
	wk, err := a.loadWorker(ctx, id)
	return c, wk, err
}

func (a *API) loadWorker(ctx context.Context, id string) (store.Worker, error) {
	wk, err := a.store.GetWorker(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return wk, web.NotFound("Worker not found: %s", id)
	}
	return wk, err
}

// workersQuery reads GET /api/admin/workers' query: status (or upstream's
// status_filter), limit (default 100, at most 1000), offset.
func workersQuery(_ http.ResponseWriter, r *http.Request, _ httprouter.Params) (q api.WorkersQuery, err error) {
	q.Status = r.URL.Query().Get("status")
	if q.Status == "" {
		q.Status = r.URL.Query().Get("status_filter")
	}
	q.Limit, q.Offset, err = page(r, 100, 1000)
	return q, err
}

// Workers lists a page of workers by creation time.
func (a *API) Workers(ctx context.Context, q api.WorkersQuery) (api.WorkerList, error) {
	if _, err := authorize(ctx, auth.ScopeAdminWorkers); err != nil {
		return api.WorkerList{}, err
	}
	f := store.WorkerFilter{Status: protocol.WorkerStatus(strings.ToLower(q.Status)), Limit: q.Limit, Offset: q.Offset}
	if q.Status != "" && !f.Status.Valid() {
		return api.WorkerList{}, web.Invalid("query parameter \"status\" must be one of connecting, idle, partial, busy, draining, offline; got %q", q.Status)
	}
	ws, total, err := a.store.ListWorkers(ctx, f)
	if err != nil {
		return api.WorkerList{}, err
	}
	out := api.WorkerList{Workers: make([]api.Worker, 0, len(ws)), Total: total}
	for _, wk := range ws {
		out.Workers = append(out.Workers, a.workerView(wk))
	}
	return out, nil
}

// Worker is one worker.
func (a *API) Worker(ctx context.Context, ref api.WorkerRef) (api.Worker, error) {
	_, wk, err := a.adminWorker(ctx, ref.ID)
	if err != nil {
		return api.Worker{}, err
	}
	v := a.workerView(wk)
	if v.Jobs, err = a.workerJobs(ctx, wk); err != nil {
		return api.Worker{}, err
	}
	return v, nil
}

// workerJobs lists the attempts out on a worker with the GPUs each holds:
// the GPU leases (by index), grouped by attempt, and the worker's current job when no
// lease names it (it took the whole worker, or the worker assigns GPUs
// itself).
func (a *API) workerJobs(ctx context.Context, wk store.Worker) ([]api.WorkerJob, error) {
	if wk.Running == 0 && wk.CurrentJobID == "" {
		return nil, nil
	}
	leases, err := a.store.GPULeases(ctx, wk.ID)
	if err != nil {
		return nil, err
	}
	var out []api.WorkerJob
	at := map[string]int{} // job id → its entry in out
	for _, l := range leases {
		i, ok := at[l.JobID]
		if !ok {
			i = len(out)
			at[l.JobID] = i
			out = append(out, api.WorkerJob{JobID: l.JobID, Attempt: l.Attempt, GPUs: []int{}})
		}
		out[i].GPUs = append(out[i].GPUs, l.Index)
	}
	if _, ok := at[wk.CurrentJobID]; wk.CurrentJobID != "" && !ok {
		out = append(out, api.WorkerJob{JobID: wk.CurrentJobID, GPUs: []int{}})
	}
	return out, nil
}

// baseURL is the orchestrator's URL as the client reached it, for the
// connection command. The Host header is the client's word: it is used only
// when it is a plain host[:port]; otherwise the address the connection
// arrived on stands in.
func (a *API) baseURL(r *http.Request) string {
	if authn.ViaAdminSocket(r) {
		return "unix://" + a.options().AdminSocketPath
	}
	if pub := a.options().PublicURL; pub != "" {
		return pub
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	host := r.Host
	if !validHostPort(host) {
		host = ""
		if addr, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok {
			host = addr.String()
		}
	}
	if host == "" {
		return "unix://" + a.options().AdminSocketPath
	}
	return scheme + "://" + host
}

// validHostPort accepts a DNS name, an IPv4 address or a bracketed IPv6
// address, each with an optional port, and nothing else.
func validHostPort(hp string) bool {
	host := hp
	if h, port, err := net.SplitHostPort(hp); err == nil {
		host = h
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 || strconv.Itoa(n) != port {
			return false
		}
	} else if strings.HasPrefix(hp, "[") && strings.HasSuffix(hp, "]") {
		host = hp[1 : len(hp)-1]
	}
	if strings.HasPrefix(hp, "[") {
		a, err := netip.ParseAddr(host)
		return err == nil && a.Is6() && a.Zone() == ""
	}
	if strings.ContainsAny(host, "[]:") {
		return false
	}
	if a, err := netip.ParseAddr(host); err == nil {
		return a.Is4()
	}
	return validDNSName(host)
}

func validDNSName(name string) bool {
	if name == "" || len(name) > 253 {
		return false
	}
	for _, label := range strings.Split(strings.TrimSuffix(name, "."), ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for _, c := range label {
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-') {
				return false
			}
		}
	}
	return true
}

// ConnectionPrompt is how a connection command asks for the worker token:
// typed or pasted at a prompt that does not echo it, so that it is not in
// the command line (the shell's history, a pasted snippet, a log) and then
// passed in the environment (in argv, ps would show it to every user of the
// machine). POSIX sh, bash and zsh alike.
const ConnectionPrompt = "printf 'Worker token: '; stty -echo; read -r SIMPLETUNER_WORKER_TOKEN; stty echo; echo; " +
	"export SIMPLETUNER_WORKER_TOKEN; "

// connectionCommand is a shell command line that starts SimpleTuner's worker
// agent against base; it holds no token (see ConnectionPrompt). The URL is
// quoted for a POSIX shell.
func connectionCommand(base string) string {
	return ConnectionPrompt + "simpletuner worker --orchestrator-url " + shellQuote(base)
}

// shellQuote returns s as one POSIX shell word: as is when it holds only
// characters no shell treats specially, else in single quotes.
func shellQuote(s string) string {
	safe := s != ""
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune("_-./:@%+,=", c)) {
			safe = false
			break
		}
	}
	if safe {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// CreateWorker creates a worker and its token, shown only in the reply.
func (a *API) CreateWorker(ctx context.Context, req api.CreateWorker) (api.WorkerCreated, error) {
	c, err := authorize(ctx, auth.ScopeAdminWorkers)
	if err != nil {
		return api.WorkerCreated{}, err
	}
	if req.Name == nil || strings.TrimSpace(*req.Name) == "" {
		return api.WorkerCreated{}, web.Invalid("field \"name\" is required")
	}
	if err := web.Printable("name", *req.Name); err != nil {
		return api.WorkerCreated{}, err
	}
	if req.WorkerType == "" {
		req.WorkerType = protocol.Persistent
	}
	if !req.WorkerType.Valid() {
		return api.WorkerCreated{}, web.Invalid("field \"worker_type\" must be \"persistent\" or \"ephemeral\"; got %q", req.WorkerType)
	}
	if err := labels.Valid("labels", req.Labels); err != nil {
		return api.WorkerCreated{}, err
	}
	if err := a.nameFree(ctx, strings.TrimSpace(*req.Name), ""); err != nil {
		return api.WorkerCreated{}, err
	}
	token := auth.NewWorkerToken()
	wk := store.Worker{
		ID: protocol.NewWorkerID(), Name: strings.TrimSpace(*req.Name), Type: req.WorkerType,
		Status: protocol.WorkerConnecting, GPUInfo: store.ReadGPUInfo(json.RawMessage(`{}`)),
		Labels: labels.Copy(req.Labels), AdminLabels: labels.Copy(req.Labels), LabelsLocked: req.Locked(),
		CreatedAt: time.Now().UTC(), CreatedBy: c.Actor(),
	}
	rec := audit.New(c.Actor(), c.IP, "worker.create", "worker", wk.ID, audit.Success,
		map[string]any{"name": wk.Name, "worker_type": wk.Type, "labels": wk.Labels, "labels_locked": wk.LabelsLocked,
			"token": auth.Accessor(token)})
	if err := a.store.CreateWorker(ctx, wk, auth.Hash(token), &rec); err != nil {
		return api.WorkerCreated{}, err
	}
	a.log.Info("worker created", "worker_id", wk.ID, "name", wk.Name, "by", c.Actor())
	return api.WorkerCreated{WorkerID: wk.ID, ID: wk.ID, Name: wk.Name, WorkerType: string(wk.Type), Labels: wk.Labels,
		LabelsLocked: wk.LabelsLocked, Token: token, ConnectionCommand: connectionCommand(c.BaseURL)}, nil
}

// nameFree refuses (409) a name another worker than self has: admins and
// simpletunerctl find a worker by its name.
func (a *API) nameFree(ctx context.Context, name, self string) error {
	other, err := a.namedOther(ctx, name, self)
	if err == nil && other != "" {
		return web.Conflict("field \"name\": worker %s is already named %q; give this one another name, so that a name finds one worker", other, name)
	}
	return err
}

// namedOther is the id of a worker other than self named name, or "".
func (a *API) namedOther(ctx context.Context, name, self string) (string, error) {
	ws, _, err := a.store.ListWorkers(ctx, store.WorkerFilter{Name: name, Limit: 2})
	for _, w := range ws {
		if w.ID != self {
			return w.ID, err
		}
	}
	return "", err
}

// patchWorkerRequest is PATCH /api/admin/workers/{id}'s path and body.
type patchWorkerRequest struct {
	ID string
	api.PatchWorker
}

func (a *API) parsePatchWorker(w http.ResponseWriter, r *http.Request, ps httprouter.Params) (patchWorkerRequest, error) {
	req := patchWorkerRequest{ID: ps.ByName("id")}
	return req, a.readJSON(w, r, &req.PatchWorker)
}

// PatchWorker changes a worker's name, type, labels (a merge) and lock.
func (a *API) PatchWorker(ctx context.Context, id string, req api.PatchWorker) (api.Worker, error) {
	c, err := authorize(ctx, auth.ScopeAdminWorkers)
	if err != nil {
		return api.Worker{}, err
	}
	if req.Name != nil && strings.TrimSpace(*req.Name) == "" {
		return api.Worker{}, web.Invalid("field \"name\" must not be empty")
	}
	if req.Name != nil {
		if err := web.Printable("name", *req.Name); err != nil {
			return api.Worker{}, err
		}
	}
	if req.WorkerType != "" && !req.WorkerType.Valid() {
		return api.Worker{}, web.Invalid("field \"worker_type\" must be \"persistent\" or \"ephemeral\"; got %q", req.WorkerType)
	}
	set := map[string]string{}
	for k, v := range req.Labels {
		if v != nil {
			set[k] = *v
		}
	}
	if err := labels.Valid("labels", set); err != nil {
		return api.Worker{}, err
	}
	if _, err := a.loadWorker(ctx, id); err != nil {
		return api.Worker{}, err
	}
	if req.Name != nil {
		if err := a.nameFree(ctx, strings.TrimSpace(*req.Name), id); err != nil {
			return api.Worker{}, err
		}
	}
	wk, err := a.store.UpdateWorker(ctx, id, func(cur *store.Worker) (*audit.Record, error) {
		if req.Name != nil {
			cur.Name = strings.TrimSpace(*req.Name)
		}
		if req.WorkerType != "" {
			cur.Type = req.WorkerType
		}
		// What the worker reported for keys the admin never owned stays,
		// unless the labels are (now) locked to the admin's. The patch is a
		// merge: a key set to null goes.
		reported := labels.Reported(cur.Labels, cur.AdminLabels)
		if len(req.Labels) > 0 {
			admin := labels.Copy(cur.AdminLabels)
			for k, v := range req.Labels {
				if v == nil {
					delete(admin, k)
					delete(reported, k)
				} else {
					admin[k] = *v
				}
			}
			if err := labels.Valid("labels", admin); err != nil {
				return nil, err
			}
			cur.AdminLabels = admin
		}
		if req.LabelsLocked != nil {
			cur.LabelsLocked = *req.LabelsLocked
		}
		cur.Labels = labels.Placement(nil, cur.AdminLabels, reported, cur.LabelsLocked)
		rec := audit.New(c.Actor(), c.IP, "worker.update", "worker", id, audit.Success,
			map[string]any{"name": req.Name, "labels": req.Labels, "labels_locked": req.LabelsLocked, "worker_type": req.WorkerType})
		return &rec, nil
	})
	if err != nil {
		return api.Worker{}, err
	}
	a.scheduler.Wake()
	return a.workerView(wk), nil
}

func deleteWorkerRef(_ http.ResponseWriter, r *http.Request, ps httprouter.Params) (api.WorkerRef, error) {
	force := r.URL.Query().Get("force")
	return api.WorkerRef{ID: ps.ByName("id"), Force: force == "true" || force == "1"}, nil
}

// DeleteWorker deletes a worker out of touch that runs nothing; with Force
// any worker: its stream is closed and its attempts end.
func (a *API) DeleteWorker(ctx context.Context, ref api.WorkerRef) (api.WorkerAction, error) {
	c, wk, err := a.adminWorker(ctx, ref.ID)
	if err != nil {
		return api.WorkerAction{}, err
	}
	if !ref.Force {
		if err := a.workers.Deletable(ctx, wk); err != nil {
			return api.WorkerAction{}, err
		}
	} else if err := a.workers.Evict(ctx, wk, c.Actor(), c.IP); err != nil {
		return api.WorkerAction{}, err
	}
	rec := audit.New(c.Actor(), c.IP, "worker.delete", "worker", wk.ID, audit.Success,
		map[string]any{"name": wk.Name, "force": ref.Force})
	if err := a.store.DeleteWorker(ctx, wk.ID, &rec); err != nil {
		return api.WorkerAction{}, err
	}
	a.heard.Forget(wk.ID)
	a.gpuHistory.Forget(wk.ID)
	a.log.Info("worker deleted", "worker_id", wk.ID, "force", ref.Force, "by", c.Actor())
	return api.WorkerAction{Success: true, WorkerID: wk.ID}, nil
}

// DrainWorker lets a worker finish what it runs and take nothing new.
func (a *API) DrainWorker(ctx context.Context, ref api.WorkerRef) (api.WorkerAction, error) {
	c, _, err := a.adminWorker(ctx, ref.ID)
	if err != nil {
		return api.WorkerAction{}, err
	}
	wk, err := a.workers.Drain(ctx, ref.ID, c.Actor(), c.IP)
	if err != nil {
		return api.WorkerAction{}, err
	}
	return api.WorkerAction{Success: true, WorkerID: ref.ID, Status: string(wk.Status)}, nil
}

// ResumeWorker undoes a drain.
func (a *API) ResumeWorker(ctx context.Context, ref api.WorkerRef) (api.WorkerAction, error) {
	c, _, err := a.adminWorker(ctx, ref.ID)
	if err != nil {
		return api.WorkerAction{}, err
	}
	wk, err := a.workers.Resume(ctx, ref.ID, c.Actor(), c.IP)
	if err != nil {
		return api.WorkerAction{}, err
	}
	status, _ := a.workers.Shown(wk) // as the worker list shows it
	return api.WorkerAction{Success: true, WorkerID: ref.ID, Status: string(status)}, nil
}

// RotateWorkerToken gives a worker a new token; the old one, and the stream
// it opened, stop working at once.
func (a *API) RotateWorkerToken(ctx context.Context, ref api.WorkerRef) (api.WorkerToken, error) {
	c, wk, err := a.adminWorker(ctx, ref.ID)
	if err != nil {
		return api.WorkerToken{}, err
	}
	token := auth.NewWorkerToken()
	rec := audit.New(c.Actor(), c.IP, "worker.token_rotate", "worker", wk.ID, audit.Success,
		map[string]string{"name": wk.Name, "token": auth.Accessor(token)})
	if err := a.store.SetWorkerTokenHash(ctx, wk.ID, auth.Hash(token), &rec); err != nil {
		return api.WorkerToken{}, err
	}
	// The old token is dead: so is the stream it opened.
	a.events.CloseWorkerStream(wk.ID, "token rotated")
	a.log.Info("worker token rotated", "worker_id", wk.ID, "by", c.Actor())
	return api.WorkerToken{WorkerID: wk.ID, Token: token, ConnectionCommand: connectionCommand(c.BaseURL)}, nil
}

// NewAdminToken creates an admin token (used by the API and the CLI).
func NewAdminToken(name string, scopes []string) (store.AdminToken, string, error) {
	if strings.TrimSpace(name) == "" {
		return store.AdminToken{}, "", web.Invalid("field \"name\" is required")
	}
	if err := web.Printable("name", name); err != nil {
		return store.AdminToken{}, "", err
	}
	if len(scopes) == 0 {
		return store.AdminToken{}, "", web.Invalid("field \"scopes\" needs at least one scope (%s)", strings.Join(auth.AllScopes(), ", "))
	}
	for _, sc := range scopes {
		if !auth.ValidScope(sc) {
			return store.AdminToken{}, "", web.Invalid("unknown scope %q; known scopes: %s", sc, strings.Join(auth.AllScopes(), ", "))
		}
	}
	token := auth.NewAdminToken()
	return store.AdminToken{ID: protocol.NewTokenID(), Name: strings.TrimSpace(name), Scopes: scopes, Hash: auth.Hash(token), CreatedAt: time.Now().UTC()}, token, nil
}

// CreateToken makes an admin token, shown only in the reply.
func (a *API) CreateToken(ctx context.Context, req api.CreateToken) (api.TokenCreated, error) {
	c, err := authorize(ctx, auth.ScopeAll)
	if err != nil {
		return api.TokenCreated{}, err
	}
	t, token, err := NewAdminToken(req.Name, req.Scopes)
	if err != nil {
		return api.TokenCreated{}, err
	}
	if t.Team, err = a.tokenTeam(req.Team); err != nil {
		return api.TokenCreated{}, err
	}
	if err := CheckTokenMaxPriority(t.Scopes, req.MaxPriority); err != nil {
		return api.TokenCreated{}, err
	}
	t.MaxPriority = req.MaxPriority
	details := map[string]any{"name": t.Name, "scopes": t.Scopes, "team": teamName(t.Team), "token": auth.Accessor(token)}
	if t.MaxPriority != nil {
		details["max_priority"] = *t.MaxPriority
	}
	rec := audit.New(c.Actor(), c.IP, "admin_token.create", "admin_token", t.ID, audit.Success, details)
	if err := a.store.CreateAdminToken(ctx, t, &rec); err != nil {
		return api.TokenCreated{}, err
	}
	return api.TokenCreated{ID: t.ID, Name: t.Name, Scopes: t.Scopes, Team: teamName(t.Team), MaxPriority: t.MaxPriority,
		Token: token}, nil
}

// Tokens lists the admin tokens, revoked ones included.
func (a *API) Tokens(ctx context.Context, _ struct{}) (api.TokenList, error) {
	if _, err := authorize(ctx, auth.ScopeAll); err != nil {
		return api.TokenList{}, err
	}
	ts, err := a.store.ListAdminTokens(ctx)
	if err != nil {
		return api.TokenList{}, err
	}
	out := api.TokenList{Tokens: make([]api.Token, 0, len(ts))}
	for _, t := range ts {
		out.Tokens = append(out.Tokens, api.Token{ID: t.ID, Name: t.Name, Scopes: t.Scopes, Team: teamName(t.Team),
			MaxPriority: t.MaxPriority, CreatedAt: protocol.Time(t.CreatedAt), RevokedAt: timePtr(t.RevokedAt), PersonID: t.PersonID,
			ExpiresAt: timePtr(t.ExpiresAt)})
	}
	return out, nil
}

func tokenRef(_ http.ResponseWriter, _ *http.Request, ps httprouter.Params) (string, error) {
	return ps.ByName("id"), nil
}

// RevokeToken revokes an admin token: it stops working at once.
func (a *API) RevokeToken(ctx context.Context, id string) (api.Revoked, error) {
	c, err := authorize(ctx, auth.ScopeAll)
	if err != nil {
		return api.Revoked{}, err
	}
	rec := audit.New(c.Actor(), c.IP, "admin_token.revoke", "admin_token", id, audit.Success, nil)
	err = a.store.RevokeAdminToken(ctx, id, &rec)
	if errors.Is(err, store.ErrNotFound) {
		return api.Revoked{}, web.NotFound("admin token not found: %s", id)
	}
	if err != nil {
		return api.Revoked{}, err
	}
	return api.Revoked{Success: true, ID: id}, nil
}
