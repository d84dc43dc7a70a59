package orchestrator

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

	"github.com/simpletuner/simpletuner-orchestration/internal/audit"
	"github.com/simpletuner/simpletuner-orchestration/internal/auth"
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
		return 0, invalid("query parameter %q must be an integer from %d to %d", name, lo, hi)
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

func (s *Server) loadWorker(r *http.Request, id string) (store.Worker, error) {
	wk, err := s.store.GetWorker(r.Context(), id)
	if errors.Is(err, store.ErrNotFound) {
		return wk, notFound("Worker not found: %s", id)
	}
	return wk, err
}

func (s *Server) listWorkers(w http.ResponseWriter, r *http.Request, _ httprouter.Params, _ auth.Principal) error {
	status := r.URL.Query().Get("status")
	if status == "" {
		status = r.URL.Query().Get("status_filter") // upstream's name
	}
	f := store.WorkerFilter{Status: protocol.WorkerStatus(strings.ToLower(status))}
	if status != "" && !f.Status.Valid() {
		return invalid("query parameter \"status\" must be one of connecting, idle, partial, busy, draining, offline; got %q", status)
	}
	var err error
	if f.Limit, f.Offset, err = page(r, 100, 1000); err != nil {
		return err
	}
	ws, total, err := s.store.ListWorkers(r.Context(), f)
	if err != nil {
		return err
	}
	views := make([]workerView, 0, len(ws))
	for _, wk := range ws {
		views = append(views, s.workerView(wk))
	}
	writeJSON(w, http.StatusOK, map[string]any{"workers": views, "total": total})
	return nil
}

func (s *Server) getWorker(w http.ResponseWriter, r *http.Request, ps httprouter.Params, _ auth.Principal) error {
	wk, err := s.loadWorker(r, ps.ByName("id"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, s.workerView(wk))
	return nil
}

type createWorkerRequest struct {
	Name       *string             `json:"name"`
	WorkerType protocol.WorkerType `json:"worker_type"`
	Labels     map[string]string   `json:"labels"`
	// LabelsLocked pins the worker's labels to the admin's: whatever the
	// worker reports is ignored for placement.
	LabelsLocked bool `json:"labels_locked"`
}

// baseURL is the orchestrator's URL as the client reached it, for the
// connection command. The Host header is the client's word: it is used only
// when it is a plain host[:port]; otherwise the address the connection
// arrived on stands in.
func (s *Server) baseURL(r *http.Request) string {
	if _, local := peerOf(r); local {
		return "unix://" + s.adminSocketPath
	}
	if pub := s.options().PublicURL; pub != "" {
		return pub
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	host := r.Host
	if !validHostPort(host) {
		host = ""
		if a, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok {
			host = a.String()
		}
	}
	if host == "" {
		return "unix://" + s.adminSocketPath
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

// connectionPrompt is how a connection command asks for the worker token:
// typed or pasted at a prompt that does not echo it, so that it is not in
// the command line (the shell's history, a pasted snippet, a log) and then
// passed in the environment (in argv, ps would show it to every user of the
// machine). POSIX sh, bash and zsh alike.
const connectionPrompt = "printf 'Worker token: '; stty -echo; read -r SIMPLETUNER_WORKER_TOKEN; stty echo; echo; " +
	"export SIMPLETUNER_WORKER_TOKEN; "

// connectionCommand is a shell command line that starts SimpleTuner's worker
// agent against base; it holds no token (see connectionPrompt). The URL is
// quoted for a POSIX shell.
func connectionCommand(base string) string {
	return connectionPrompt + "simpletuner worker --orchestrator-url " + shellQuote(base)
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

func (s *Server) createWorker(w http.ResponseWriter, r *http.Request, _ httprouter.Params, p auth.Principal) error {
	var req createWorkerRequest
	if err := s.decodeJSON(w, r, &req); err != nil {
		return err
	}
	if req.Name == nil || strings.TrimSpace(*req.Name) == "" {
		return invalid("field \"name\" is required")
	}
	if err := printable("name", *req.Name); err != nil {
		return err
	}
	if req.WorkerType == "" {
		req.WorkerType = protocol.Persistent
	}
	if !req.WorkerType.Valid() {
		return invalid("field \"worker_type\" must be \"persistent\" or \"ephemeral\"; got %q", req.WorkerType)
	}
	if err := validLabels("labels", req.Labels); err != nil {
		return err
	}
	if err := s.nameFree(r.Context(), strings.TrimSpace(*req.Name), ""); err != nil {
		return err
	}
	token := auth.NewWorkerToken()
	wk := store.Worker{
		ID: protocol.NewWorkerID(), Name: strings.TrimSpace(*req.Name), Type: req.WorkerType,
		Status: protocol.WorkerConnecting, GPUInfo: json.RawMessage(`{}`),
		Labels: copyLabels(req.Labels), AdminLabels: copyLabels(req.Labels), LabelsLocked: req.LabelsLocked,
		CreatedAt: time.Now().UTC(), CreatedBy: p.Actor(),
	}
	rec := audit.New(p.Actor(), peerIP(r), "worker.create", "worker", wk.ID, audit.Success,
		map[string]any{"name": wk.Name, "worker_type": wk.Type, "labels": wk.Labels, "labels_locked": wk.LabelsLocked,
			"token": auth.Accessor(token)})
	if err := s.store.CreateWorker(r.Context(), wk, auth.Hash(token), &rec); err != nil {
		return err
	}
	s.log.Info("worker created", "worker_id", wk.ID, "name", wk.Name, "by", p.Actor())
	writeJSON(w, http.StatusCreated, map[string]any{
		"worker_id": wk.ID, "id": wk.ID, "name": wk.Name, "worker_type": wk.Type, "labels": wk.Labels,
		"labels_locked": wk.LabelsLocked, "token": token, "connection_command": connectionCommand(s.baseURL(r)),
	})
	return nil
}

// printable refuses a text field that holds control characters (see
// protocol.CheckPrintable).
func printable(field, v string) error {
	if err := protocol.CheckPrintable(v); err != nil {
		return invalid("field %q %v", field, err)
	}
	return nil
}

// nameFree refuses (409) a name another worker than self has: admins and
// simpletunerctl find a worker by its name.
func (s *Server) nameFree(ctx context.Context, name, self string) error {
	other, err := s.namedOther(ctx, name, self)
	if err == nil && other != "" {
		return conflict("field \"name\": worker %s is already named %q; give this one another name, so that a name finds one worker", other, name)
	}
	return err
}

// namedOther is the id of a worker other than self named name, or "".
func (s *Server) namedOther(ctx context.Context, name, self string) (string, error) {
	ws, _, err := s.store.ListWorkers(ctx, store.WorkerFilter{Name: name, Limit: 2})
	for _, w := range ws {
		if w.ID != self {
			return w.ID, err
		}
	}
	return "", err
}

func validLabels(field string, labels map[string]string) error {
	if err := protocol.CheckLabels(labels); err != nil {
		return invalid("field %q: %v", field, err)
	}
	return nil
}

func copyLabels(m map[string]string) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// patchWorkerRequest follows JSON merge-patch for labels: the keys given are
// added or replaced, a key given as null is removed, the others stay.
type patchWorkerRequest struct {
	Name         *string             `json:"name"`
	Labels       map[string]*string  `json:"labels"`
	LabelsLocked *bool               `json:"labels_locked"`
	WorkerType   protocol.WorkerType `json:"worker_type"`
}

func (s *Server) patchWorker(w http.ResponseWriter, r *http.Request, ps httprouter.Params, p auth.Principal) error {
	var req patchWorkerRequest
	if err := s.decodeJSON(w, r, &req); err != nil {
		return err
	}
	if req.Name != nil && strings.TrimSpace(*req.Name) == "" {
		return invalid("field \"name\" must not be empty")
	}
	if req.Name != nil {
		if err := printable("name", *req.Name); err != nil {
			return err
		}
	}
	if req.WorkerType != "" && !req.WorkerType.Valid() {
		return invalid("field \"worker_type\" must be \"persistent\" or \"ephemeral\"; got %q", req.WorkerType)
	}
	set := map[string]string{}
	for k, v := range req.Labels {
		if v != nil {
			set[k] = *v
		}
	}
	if err := validLabels("labels", set); err != nil {
		return err
	}
	id := ps.ByName("id")
	if _, err := s.loadWorker(r, id); err != nil {
		return err
	}
	if req.Name != nil {
		if err := s.nameFree(r.Context(), strings.TrimSpace(*req.Name), id); err != nil {
			return err
		}
	}
	wk, err := s.store.UpdateWorker(r.Context(), id, func(cur *store.Worker) (*audit.Record, error) {
		if req.Name != nil {
			cur.Name = strings.TrimSpace(*req.Name)
		}
		if req.WorkerType != "" {
			cur.Type = req.WorkerType
		}
		// What the worker reported for keys the admin never owned stays,
		// unless the labels are (now) locked to the admin's. The patch is a
		// merge: a key set to null goes.
		reported := reportedPart(cur.Labels, cur.AdminLabels)
		if len(req.Labels) > 0 {
			admin := copyLabels(cur.AdminLabels)
			for k, v := range req.Labels {
				if v == nil {
					delete(admin, k)
					delete(reported, k)
				} else {
					admin[k] = *v
				}
			}
			if err := validLabels("labels", admin); err != nil {
				return nil, err
			}
			cur.AdminLabels = admin
		}
		if req.LabelsLocked != nil {
			cur.LabelsLocked = *req.LabelsLocked
		}
		cur.Labels = placementLabels(nil, cur.AdminLabels, reported, cur.LabelsLocked)
		rec := audit.New(p.Actor(), peerIP(r), "worker.update", "worker", id, audit.Success,
			map[string]any{"name": req.Name, "labels": req.Labels, "labels_locked": req.LabelsLocked, "worker_type": req.WorkerType})
		return &rec, nil
	})
	if err != nil {
		return err
	}
	s.Wake()
	writeJSON(w, http.StatusOK, s.workerView(wk))
	return nil
}

func (s *Server) deleteWorker(w http.ResponseWriter, r *http.Request, ps httprouter.Params, p auth.Principal) error {
	ctx := r.Context()
	wk, err := s.loadWorker(r, ps.ByName("id"))
	if err != nil {
		return err
	}
	force := r.URL.Query().Get("force")
	forced := force == "true" || force == "1"
	if !forced {
		if err := s.deletable(ctx, wk); err != nil {
			return err
		}
	}
	if forced {
		if err := s.evictWorker(ctx, wk, p.Actor(), peerIP(r)); err != nil {
			return err
		}
	}
	rec := audit.New(p.Actor(), peerIP(r), "worker.delete", "worker", wk.ID, audit.Success,
		map[string]any{"name": wk.Name, "force": forced})
	if err := s.store.DeleteWorker(ctx, wk.ID, &rec); err != nil {
		return err
	}
	s.telemetry.forget(wk.ID)
	s.gpuHistory.forget(wk.ID)
	s.clocks.forget(wk.ID)
	s.log.Info("worker deleted", "worker_id", wk.ID, "force", forced, "by", p.Actor())
	writeJSON(w, http.StatusOK, map[string]any{"success": true, "worker_id": wk.ID})
	return nil
}

func (s *Server) drainWorker(w http.ResponseWriter, r *http.Request, ps httprouter.Params, p auth.Principal) error {
	id := ps.ByName("id")
	if _, err := s.loadWorker(r, id); err != nil {
		return err
	}
	wk, err := s.drain(r.Context(), id, p.Actor(), peerIP(r))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"success": true, "worker_id": id, "status": wk.Status})
	return nil
}

func (s *Server) resumeWorker(w http.ResponseWriter, r *http.Request, ps httprouter.Params, p auth.Principal) error {
	id := ps.ByName("id")
	if _, err := s.loadWorker(r, id); err != nil {
		return err
	}
	wk, err := s.resume(r.Context(), id, p.Actor(), peerIP(r))
	if err != nil {
		return err
	}
	status, _ := s.shown(wk) // as the worker list shows it
	writeJSON(w, http.StatusOK, map[string]any{"success": true, "worker_id": id, "status": status})
	return nil
}

func (s *Server) rotateToken(w http.ResponseWriter, r *http.Request, ps httprouter.Params, p auth.Principal) error {
	wk, err := s.loadWorker(r, ps.ByName("id"))
	if err != nil {
		return err
	}
	token := auth.NewWorkerToken()
	rec := audit.New(p.Actor(), peerIP(r), "worker.token_rotate", "worker", wk.ID, audit.Success,
		map[string]string{"name": wk.Name, "token": auth.Accessor(token)})
	if err := s.store.SetWorkerTokenHash(r.Context(), wk.ID, auth.Hash(token), &rec); err != nil {
		return err
	}
	// The old token is dead: so is the stream it opened.
	s.closeWorkerStream(wk.ID, "token rotated")
	s.log.Info("worker token rotated", "worker_id", wk.ID, "by", p.Actor())
	writeJSON(w, http.StatusOK, map[string]any{"worker_id": wk.ID, "token": token, "connection_command": connectionCommand(s.baseURL(r))})
	return nil
}

type createTokenRequest struct {
	Name   string   `json:"name"`
	Scopes []string `json:"scopes"`
}

// NewAdminToken creates an admin token (used by the API and the CLI).
func NewAdminToken(name string, scopes []string) (store.AdminToken, string, error) {
	if strings.TrimSpace(name) == "" {
		return store.AdminToken{}, "", invalid("field \"name\" is required")
	}
	if err := printable("name", name); err != nil {
		return store.AdminToken{}, "", err
	}
	if len(scopes) == 0 {
		return store.AdminToken{}, "", invalid("field \"scopes\" needs at least one scope (%s)", strings.Join(auth.AllScopes(), ", "))
	}
	for _, sc := range scopes {
		if !auth.ValidScope(sc) {
			return store.AdminToken{}, "", invalid("unknown scope %q; known scopes: %s", sc, strings.Join(auth.AllScopes(), ", "))
		}
	}
	token := auth.NewAdminToken()
	id := strings.Replace(protocol.NewJobID(), "j_", "tok_", 1)
	return store.AdminToken{ID: id, Name: strings.TrimSpace(name), Scopes: scopes, Hash: auth.Hash(token), CreatedAt: time.Now().UTC()}, token, nil
}

func (s *Server) createAdminToken(w http.ResponseWriter, r *http.Request, _ httprouter.Params, p auth.Principal) error {
	var req createTokenRequest
	if err := s.decodeJSON(w, r, &req); err != nil {
		return err
	}
	t, token, err := NewAdminToken(req.Name, req.Scopes)
	if err != nil {
		return err
	}
	rec := audit.New(p.Actor(), peerIP(r), "admin_token.create", "admin_token", t.ID, audit.Success,
		map[string]any{"name": t.Name, "scopes": t.Scopes, "token": auth.Accessor(token)})
	if err := s.store.CreateAdminToken(r.Context(), t, &rec); err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, map[string]any{"id": t.ID, "name": t.Name, "scopes": t.Scopes, "token": token})
	return nil
}

func (s *Server) listAdminTokens(w http.ResponseWriter, r *http.Request, _ httprouter.Params, _ auth.Principal) error {
	ts, err := s.store.ListAdminTokens(r.Context())
	if err != nil {
		return err
	}
	out := make([]map[string]any, 0, len(ts))
	for _, t := range ts {
		out = append(out, map[string]any{"id": t.ID, "name": t.Name, "scopes": t.Scopes,
			"created_at": protocol.Time(t.CreatedAt), "revoked_at": timePtr(t.RevokedAt)})
	}
	writeJSON(w, http.StatusOK, map[string]any{"tokens": out})
	return nil
}

func (s *Server) revokeAdminToken(w http.ResponseWriter, r *http.Request, ps httprouter.Params, p auth.Principal) error {
	id := ps.ByName("id")
	rec := audit.New(p.Actor(), peerIP(r), "admin_token.revoke", "admin_token", id, audit.Success, nil)
	err := s.store.RevokeAdminToken(r.Context(), id, &rec)
	if errors.Is(err, store.ErrNotFound) {
		return notFound("admin token not found: %s", id)
	}
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"success": true, "id": id})
	return nil
}
