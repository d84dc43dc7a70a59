package adminapi

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/julienschmidt/httprouter"

	"github.com/simpletuner/simpletuner-orchestration/internal/api"
	"github.com/simpletuner/simpletuner-orchestration/internal/artifacts"
	"github.com/simpletuner/simpletuner-orchestration/internal/auth"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator/web"
)

func artifactsQuery(_ http.ResponseWriter, r *http.Request, ps httprouter.Params) (api.ArtifactsQuery, error) {
	attempt, err := attemptParam(r)
	return api.ArtifactsQuery{JobID: ps.ByName("job_id"), Attempt: attempt}, err
}

// Artifacts lists a job's artifacts: every attempt's, newest attempt first,
// or one attempt's.
func (a *API) Artifacts(ctx context.Context, q api.ArtifactsQuery) (api.JobArtifacts, error) {
	c, err := authorize(ctx, auth.ScopeQueueView)
	if err != nil {
		return api.JobArtifacts{}, err
	}
	arts, err := a.uploads.ArtifactStore()
	if err != nil {
		return api.JobArtifacts{}, err
	}
	j, err := a.jobFor(ctx, c, q.JobID, auth.ScopeQueueView)
	if err != nil {
		return api.JobArtifacts{}, err
	}
	objs, err := arts.List(ctx, j.ID, q.Attempt)
	if err != nil {
		return api.JobArtifacts{}, web.ArtifactError(a.log, err)
	}
	out := api.JobArtifacts{JobID: j.ID, Artifacts: make([]api.Artifact, 0, len(objs))}
	for _, o := range objs {
		out.Artifacts = append(out.Artifacts, api.Artifact{Path: o.Path, Attempt: o.Attempt, Size: o.Size,
			ModifiedAt: o.Modified.UTC().Format(time.RFC3339), MD5: o.MD5, SHA256: o.SHA256})
		out.TotalBytes += o.Size
	}
	return out, nil
}

func attemptParam(r *http.Request) (int, error) {
	v := r.URL.Query().Get("attempt")
	if v == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		return 0, web.Invalid("attempt must be a positive integer, not %q", v)
	}
	return n, nil
}

// downloadArtifact serves one artifact with Range support (curl -C -
// resumes). Without ?attempt=N it is the newest attempt's copy.
func (a *API) downloadArtifact(w http.ResponseWriter, r *http.Request, ps httprouter.Params, caller auth.Principal) error {
	arts, err := a.uploads.ArtifactStore()
	if err != nil {
		return err
	}
	j, err := a.jobFor(r.Context(), a.CallerOf(r, caller), ps.ByName("job_id"), auth.ScopeQueueView)
	if err != nil {
		return err
	}
	p := strings.TrimPrefix(ps.ByName("path"), "/")
	bucket, key, err := artifacts.SplitPath(p)
	if err != nil {
		return web.ArtifactError(a.log, err)
	}
	attempt, err := attemptParam(r)
	if err != nil {
		return err
	}
	first, last := j.Attempt, 1
	if attempt > 0 {
		first, last = attempt, attempt
	}
	for n := first; n >= last; n-- {
		rd, obj, err := arts.Open(r.Context(), artifacts.Ref{JobID: j.ID, Attempt: n, Bucket: bucket, Key: key})
		if errors.Is(err, artifacts.ErrNotFound) {
			continue
		}
		if err != nil {
			return web.ArtifactError(a.log, err)
		}
		defer rd.Close()
		w.Header().Set("X-Artifact-Attempt", strconv.Itoa(n))
		web.ServeArtifact(w, r, rd, obj)
		return nil
	}
	return web.NotFound("artifact not found: %s (job %s)", p, j.ID)
}
