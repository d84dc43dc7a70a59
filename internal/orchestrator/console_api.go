package orchestrator

// Read-only endpoints that the web dashboard needs and other clients may use
// too: who am I, which configs can I submit, the audit log newest first with
// filters, verifying the audit chain, and the fleet summary inside stats.

import (
	"context"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/julienschmidt/httprouter"

	"github.com/simpletuner/simpletuner-orchestration/internal/auth"
	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
	"github.com/simpletuner/simpletuner-orchestration/internal/store"
)

// whoami describes the caller's credential (never the token itself).
func (s *Server) whoami(w http.ResponseWriter, _ *http.Request, _ httprouter.Params, p auth.Principal) error {
	scopes := p.Scopes
	if scopes == nil {
		scopes = []string{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"kind": p.Kind, "id": p.ID, "name": p.Name, "scopes": scopes, "actor": p.Actor()})
	return nil
}

// maxConfigNames bounds the configs listing.
const maxConfigNames = 1000

// listConfigs names the configs that submit's config_name can resolve:
// <dir>/<name>/config.json and <dir>/<name>.json.
func (s *Server) listConfigs(w http.ResponseWriter, _ *http.Request, _ httprouter.Params, _ auth.Principal) error {
	dir := s.options().ConfigsDir
	entries, err := os.ReadDir(dir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	seen := map[string]bool{}
	names := []string{}
	for _, e := range entries {
		name := e.Name()
		if strings.HasPrefix(name, ".") {
			continue
		}
		switch {
		case e.IsDir():
			if fi, err := os.Stat(filepath.Join(dir, name, "config.json")); err != nil || !fi.Mode().IsRegular() {
				continue
			}
		case strings.HasSuffix(strings.ToLower(name), ".json"):
			name = name[:len(name)-len(".json")]
		default:
			continue
		}
		if name != "" && !seen[name] && !strings.Contains(name, "..") {
			seen[name] = true
			names = append(names, name)
		}
	}
	sort.Strings(names)
	truncated := len(names) > maxConfigNames
	if truncated {
		names = names[:maxConfigNames]
	}
	writeJSON(w, http.StatusOK, map[string]any{"configs": names, "truncated": truncated})
	return nil
}

// wantsAuditFilter reports whether a GET /api/admin/audit asks for the
// newest-first, filtered listing instead of the oldest-first one after since.
func wantsAuditFilter(r *http.Request) bool {
	q := r.URL.Query()
	return q.Has("order") || q.Has("actor") || q.Has("action") || q.Has("target") || q.Has("before")
}

func (s *Server) listAuditNewest(w http.ResponseWriter, r *http.Request) error {
	if o := r.URL.Query().Get("order"); o != "" && o != "newest" {
		return invalid("query parameter \"order\" must be \"newest\" (or absent); got %q", o)
	}
	// A previous page's "next" continues back from its last record.
	before, limit, err := auditPageArgs(r, "before", 1)
	if err != nil {
		return err
	}
	q := r.URL.Query()
	f := store.AuditFilter{Actor: strings.TrimSpace(q.Get("actor")), Action: strings.TrimSpace(q.Get("action")),
		TargetID: strings.TrimSpace(q.Get("target")), BeforeSeq: before, Limit: limit}
	recs, err := s.store.ListAuditNewest(r.Context(), f)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, auditPage(recs, limit))
	return nil
}

// gpuModelSummary is one GPU model across the fleet.
type gpuModelSummary struct {
	Model   string  `json:"model"`
	VRAMGB  float64 `json:"vram_gb"`
	Total   int     `json:"total"`   // on workers that are not offline
	InUse   int     `json:"in_use"`  // on busy workers
	Offline int     `json:"offline"` // on offline workers
}

// fleetSummary counts workers by status and GPUs by model, from one
// aggregate read (a few rows per distinct GPU description, not one per worker).
func (s *Server) fleetSummary(ctx context.Context) (map[protocol.WorkerStatus]int, []gpuModelSummary, error) {
	groups, err := s.store.SummarizeWorkers(ctx)
	if err != nil {
		return nil, nil, err
	}
	byStatus := map[protocol.WorkerStatus]int{}
	models := map[string]*gpuModelSummary{}
	for _, grp := range groups {
		byStatus[grp.Status] += grp.Count
		g := protocol.ParseGPUInfo(grp.GPUInfo)
		if g.Count <= 0 {
			continue
		}
		name := g.Name
		if name == "" {
			name = "unknown"
		}
		m := models[name]
		if m == nil {
			m = &gpuModelSummary{Model: name, VRAMGB: g.VRAMGB}
			models[name] = m
		}
		n := g.Count * grp.Count
		switch {
		case grp.Status == protocol.WorkerOffline:
			m.Offline += n
		case grp.HasJob: // draining with a job still running counts too
			m.Total += n
			m.InUse += min(grp.GPUsUsed, n)
		default:
			m.Total += n
		}
	}
	out := make([]gpuModelSummary, 0, len(models))
	for _, m := range models {
		out = append(out, *m)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Model < out[j].Model })
	return byStatus, out, nil
}

// recentWindow is the span of the "finished lately" counts in stats.
const recentWindow = 24 * time.Hour
