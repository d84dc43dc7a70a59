package adminapi

// Read-only endpoints that the web dashboard needs and other clients may use
// too: who am I, which configs can I submit, the audit log newest first with
// filters, verifying the audit chain, and the fleet summary inside stats.

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/api"
	"github.com/simpletuner/simpletuner-orchestration/internal/auth"
	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
)

// Whoami describes the caller's credential (never the token itself).
func (a *API) Whoami(ctx context.Context, _ struct{}) (api.Whoami, error) {
	c, err := authorize(ctx, scopeAnyCaller)
	if err != nil {
		return api.Whoami{}, err
	}
	scopes := c.Scopes
	if scopes == nil {
		scopes = []string{}
	}
	limit, _ := priorityLimit(c, a.options().Teams.Team(c.TeamOrDefault()))
	out := api.Whoami{Kind: c.Kind, ID: c.ID, Name: c.Name, Scopes: scopes, Actor: c.Actor(), Team: c.TeamOrDefault(),
		MaxPriority: limit, Memberships: membershipsOf(c.Principal), TokenID: c.TokenID, ExpiresAt: timePtr(c.TokenExpiresAt)}
	if c.Kind == auth.KindPerson {
		p, err := a.store.GetPerson(ctx, c.ID)
		if err != nil {
			return api.Whoami{}, err
		}
		s := personSummary(p)
		out.Person = &s
	}
	return out, nil
}

// maxConfigNames bounds the configs listing.
const maxConfigNames = 1000

// Configs names the configs that submit's config_name can resolve:
// <dir>/<name>/config.json and <dir>/<name>.json.
func (a *API) Configs(ctx context.Context, _ struct{}) (api.ConfigList, error) {
	if _, err := authorize(ctx, auth.ScopeQueueSubmit); err != nil {
		return api.ConfigList{}, err
	}
	dir := a.options().ConfigsDir
	entries, err := os.ReadDir(dir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return api.ConfigList{}, err
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
	return api.ConfigList{Configs: names, Truncated: truncated}, nil
}

// fleetSummary counts workers by status and GPUs by model, from one
// aggregate read (a few rows per distinct GPU description, not one per worker).
func (a *API) fleetSummary(ctx context.Context) (map[protocol.WorkerStatus]int, []api.GPUModel, error) {
	groups, err := a.store.SummarizeWorkers(ctx)
	if err != nil {
		return nil, nil, err
	}
	byStatus := map[protocol.WorkerStatus]int{}
	models := map[string]*api.GPUModel{}
	for _, grp := range groups {
		byStatus[grp.Status] += grp.Count
		g := grp.GPUInfo
		if g.Count <= 0 {
			continue
		}
		name := g.Name
		if name == "" {
			name = "unknown"
		}
		m := models[name]
		if m == nil {
			m = &api.GPUModel{Model: name, VRAMGB: g.VRAMGB}
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
	out := make([]api.GPUModel, 0, len(models))
	for _, m := range models {
		out = append(out, *m)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Model < out[j].Model })
	return byStatus, out, nil
}

// recentWindow is the span of the "finished lately" counts in stats.
const recentWindow = 24 * time.Hour
