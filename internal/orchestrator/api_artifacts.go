package orchestrator

import (
	"context"
	"errors"
	"io"
	"mime"
	"net/http"
	"path"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/julienschmidt/httprouter"

	"github.com/simpletuner/simpletuner-orchestration/internal/api"
	"github.com/simpletuner/simpletuner-orchestration/internal/artifacts"
	"github.com/simpletuner/simpletuner-orchestration/internal/auth"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator/diskfull"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator/web"
	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
	"github.com/simpletuner/simpletuner-orchestration/internal/store"
)

// Artifacts: a running job publishes files S3-style under /api/cloud/storage
// with its attempt's upload token; admins (queue.view) list and download
// them under /api/queue/{id}/artifacts.

// artifactMetrics count uploads for /metrics.
type artifactMetrics struct {
	uploads  atomic.Int64
	bytes    atomic.Int64
	refusals atomic.Int64
}

// SetArtifacts gives the server its artifact storage; without it the
// artifact endpoints answer 503.
func (s *Server) SetArtifacts(a *artifacts.Store) {
	s.artifacts.Store(a)
	s.applyArtifactLimits(s.options())
}

func (s *Server) applyArtifactLimits(o Options) {
	if a := s.artifacts.Load(); a != nil {
		a.SetLimits(artifacts.Limits{MaxObjectBytes: o.ArtifactMaxObjectBytes, MaxJobBytes: o.ArtifactMaxJobBytes,
			MaxJobObjects: o.ArtifactMaxJobObjects})
	}
}

func (s *Server) artifactStore() (*artifacts.Store, error) {
	a := s.artifacts.Load()
	if a == nil {
		return nil, web.Errorf(http.StatusServiceUnavailable, protocol.CodeUnavailable, "artifact storage is not configured on this orchestrator")
	}
	return a, nil
}

// uploader is what an upload token stands for: one attempt of one job.
type uploader struct {
	job     store.Job
	attempt store.Attempt
}

type uploadHandler func(w http.ResponseWriter, r *http.Request, ps httprouter.Params, u uploader, a *artifacts.Store) error

// uploadTokenHeaders are where a job sends its token, in the order looked at.
var uploadTokenHeaders = []string{"X-Upload-Token", "X-SimpleTuner-Secret"}

const uploadPrefix = "stu_"

// upload authenticates a job's upload token and checks that its attempt may
// still upload.
func (s *Server) upload(h uploadHandler) httprouter.Handle {
	return func(w http.ResponseWriter, r *http.Request, ps httprouter.Params) {
		a, err := s.artifactStore()
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		var token string
		for _, name := range uploadTokenHeaders {
			if token = strings.TrimSpace(r.Header.Get(name)); token != "" {
				break
			}
		}
		if token == "" {
			detail := "authentication required: send the job's upload token ($SIMPLETUNER_UPLOAD_TOKEN) in the X-Upload-Token header"
			if r.Header.Get("Authorization") != "" || r.Header.Get("X-API-Key") != "" {
				detail += "; admins list and download a job's artifacts under /api/queue/{job_id}/artifacts"
			}
			s.writeError(w, r, web.Errorf(http.StatusUnauthorized, protocol.CodeUnauthorized, "%s", detail))
			return
		}
		// As for other credentials: a blocked peer's garbage costs no lookup,
		// a token of the right shape always gets one.
		c := presenterOf(r)
		if err := s.limited(c, token, uploadTokenShape(token)); err != nil {
			s.writeError(w, r, err)
			return
		}
		hash := auth.Hash(token)
		att, err := s.store.GetAttemptByUploadTokenHash(r.Context(), hash)
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			s.writeError(w, r, err)
			return
		}
		if err != nil || !auth.Equal(att.UploadTokenHash, hash) {
			why := "it belongs to no job attempt"
			if !uploadTokenShape(token) {
				why = "an upload token starts with " + uploadPrefix + " (it is in $SIMPLETUNER_UPLOAD_TOKEN)"
			}
			s.writeError(w, r, s.refused(c, token, protocol.CodeInvalidToken, "Invalid upload token: "+why))
			return
		}
		j, err := s.store.GetJob(r.Context(), att.JobID)
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		if err := s.mayUpload(j, att, time.Now()); err != nil {
			s.writeError(w, r, err)
			return
		}
		if err := h(w, r, ps, uploader{job: j, attempt: att}, a); err != nil {
			s.writeError(w, r, err)
		}
	}
}

// uploadTokenShape reports whether token looks like one the scheduler makes.
func uploadTokenShape(token string) bool {
	body, ok := strings.CutPrefix(token, uploadPrefix)
	if !ok || len(body) != auth.BodyLen {
		return false
	}
	for i := 0; i < len(body); i++ {
		c := body[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// mayUpload fences uploads as reports are fenced: only the job's current
// attempt may store. Its token works while the attempt runs and for
// upload_grace after it ends (time to publish final weights after the
// completion report); after that it is refused as expired (401). A replaced
// attempt is stale at once (409), grace or not.
func (s *Server) mayUpload(j store.Job, a store.Attempt, now time.Time) error {
	if j.Attempt != a.Number {
		s.metrics.StaleRejections.Add(1)
		s.log.Info("stale upload refused", "job_id", j.ID, "attempt", a.Number, "current_attempt", j.Attempt)
		return web.Errorf(http.StatusConflict, protocol.CodeStaleAttempt,
			"attempt %d of job %s has been replaced by attempt %d; its upload token no longer works", a.Number, j.ID, j.Attempt)
	}
	grace := s.options().ArtifactUploadGrace
	if a.EndedAt != nil && now.Sub(*a.EndedAt) > grace {
		return web.Errorf(http.StatusUnauthorized, protocol.CodeInvalidToken,
			"the upload token of attempt %d of job %s has expired: the attempt ended at %s and uploads are accepted for %s after that (artifacts.upload_grace)",
			a.Number, j.ID, protocol.Time(*a.EndedAt), grace)
	}
	return nil
}

// stillCurrent is checked once an upload's body has arrived, before the
// object appears: the attempt may have been replaced while it streamed. The
// grace is not checked again; an upload that began in time may finish.
func (s *Server) stillCurrent(ctx context.Context, u uploader) func() error {
	return func() error {
		j, err := s.store.GetJob(ctx, u.job.ID)
		if err != nil {
			return err
		}
		if j.Attempt != u.attempt.Number {
			return s.mayUpload(j, u.attempt, time.Now())
		}
		return nil
	}
}

// artifactError maps the store's errors onto HTTP answers.
func (s *Server) artifactError(err error) error {
	var tl *artifacts.TooLargeError
	switch {
	case errors.As(err, &tl):
		s.metrics.artifacts.refusals.Add(1)
		return web.Errorf(http.StatusRequestEntityTooLarge, protocol.CodeTooLarge, "%s; nothing was stored", tl.Error())
	case errors.Is(err, artifacts.ErrInvalidName):
		return web.Errorf(http.StatusBadRequest, protocol.CodeInvalidRequest, "Invalid bucket or key: %v", err)
	case errors.Is(err, artifacts.ErrNotFound):
		return web.NotFound("Object not found")
	case errors.Is(err, artifacts.ErrConflict):
		return web.Conflict("%v", err)
	case errors.Is(err, artifacts.ErrUnsafePath):
		s.log.Warn("artifact path refused", "err", err)
		return web.Errorf(http.StatusForbidden, protocol.CodeForbidden, "%v", err)
	case errors.Is(err, artifacts.ErrUnavailable):
		// Not the database: say which store failed, the detail stays in the log.
		s.log.Warn("the artifact store is unreachable", "err", err)
		return web.Errorf(http.StatusServiceUnavailable, protocol.CodeUnavailable,
			"the artifact store is unreachable; nothing was changed, try again shortly")
	case errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, context.Canceled) || isBodyReadError(err):
		return web.Errorf(http.StatusBadRequest, protocol.CodeInvalidRequest, "the upload was interrupted (%v); nothing was stored", err)
	}
	return err
}

// isBodyReadError tells a broken request body (the client went away) from
// a failure of the storage.
func isBodyReadError(err error) bool {
	msg := err.Error()
	return strings.Contains(msg, "reading the upload") || strings.Contains(msg, "http: request body too large") ||
		strings.Contains(msg, "connection reset") || strings.Contains(msg, "unexpected EOF")
}

func (s *Server) putObject(w http.ResponseWriter, r *http.Request, ps httprouter.Params, u uploader, a *artifacts.Store) error {
	ref := artifacts.Ref{JobID: u.job.ID, Attempt: u.attempt.Number, Bucket: ps.ByName("bucket"),
		Key: strings.TrimPrefix(ps.ByName("key"), "/")}
	if err := ref.Validate(); err != nil {
		return s.artifactError(err)
	}
	obj, err := a.Put(r.Context(), ref, r.Body, r.ContentLength, s.stillCurrent(r.Context(), u))
	if err != nil {
		var ae *api.Error
		if errors.As(err, &ae) {
			return ae // the attempt was replaced meanwhile
		}
		if !diskfull.IsNoSpace(err) { // a full disk is logged once, not per upload
			s.log.Info("artifact upload failed", "job_id", ref.JobID, "attempt", ref.Attempt, "path", ref.Path(), "err", err)
		}
		return s.artifactError(err)
	}
	s.metrics.artifacts.uploads.Add(1)
	s.metrics.artifacts.bytes.Add(obj.Size)
	s.log.Info("artifact stored", "job_id", ref.JobID, "attempt", ref.Attempt, "path", ref.Path(), "bytes", obj.Size, "sha256", obj.SHA256)
	w.Header().Set("ETag", obj.ETag())
	web.WriteJSON(w, http.StatusOK, map[string]any{"ETag": obj.ETag(), "Key": ref.Key, "Bucket": ref.Bucket,
		"Size": obj.Size, "SHA256": obj.SHA256})
	return nil
}

// getObject serves one of the attempt's own objects (a client checking what
// it uploaded); a trailing "/" lists the bucket instead.
func (s *Server) getObject(w http.ResponseWriter, r *http.Request, ps httprouter.Params, u uploader, a *artifacts.Store) error {
	key := strings.TrimPrefix(ps.ByName("key"), "/")
	if key == "" {
		return s.listObjects(w, r, ps, u, a)
	}
	ref := artifacts.Ref{JobID: u.job.ID, Attempt: u.attempt.Number, Bucket: ps.ByName("bucket"), Key: key}
	rd, obj, err := a.Open(r.Context(), ref)
	if err != nil {
		return s.artifactError(err)
	}
	defer rd.Close()
	serveArtifact(w, r, rd, obj)
	return nil
}

// listBuckets lists the attempt's buckets with their sizes, newest first.
func (s *Server) listBuckets(w http.ResponseWriter, r *http.Request, _ httprouter.Params, u uploader, a *artifacts.Store) error {
	objs, err := a.List(r.Context(), u.job.ID, u.attempt.Number)
	if err != nil {
		return s.artifactError(err)
	}
	type bucket struct {
		Name         string  `json:"Name"`
		Size         int64   `json:"Size"`
		FileCount    int     `json:"FileCount"`
		LastModified float64 `json:"LastModified"`
	}
	byName := map[string]*bucket{}
	var total int64
	for _, o := range objs {
		name, _, _ := strings.Cut(o.Path, "/")
		b := byName[name]
		if b == nil {
			b = &bucket{Name: name}
			byName[name] = b
		}
		b.Size += o.Size
		b.FileCount++
		b.LastModified = max(b.LastModified, epochSeconds(o.Modified))
		total += o.Size
	}
	out := make([]bucket, 0, len(byName))
	for _, b := range byName {
		out = append(out, *b)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].LastModified != out[j].LastModified {
			return out[i].LastModified > out[j].LastModified
		}
		return out[i].Name < out[j].Name
	})
	web.WriteJSON(w, http.StatusOK, map[string]any{"Buckets": out, "total_size": total})
	return nil
}

// listObjects lists one bucket of the attempt.
func (s *Server) listObjects(w http.ResponseWriter, r *http.Request, ps httprouter.Params, u uploader, a *artifacts.Store) error {
	name := ps.ByName("bucket")
	if err := artifacts.ValidateBucket(name); err != nil {
		return s.artifactError(err)
	}
	objs, err := a.List(r.Context(), u.job.ID, u.attempt.Number)
	if err != nil {
		return s.artifactError(err)
	}
	type content struct {
		Key          string  `json:"Key"`
		Size         int64   `json:"Size"`
		LastModified float64 `json:"LastModified"`
		ETag         string  `json:"ETag,omitempty"`
	}
	out := []content{}
	for _, o := range objs {
		if key, ok := strings.CutPrefix(o.Path, name+"/"); ok {
			out = append(out, content{Key: key, Size: o.Size, LastModified: epochSeconds(o.Modified), ETag: o.ETag()})
		}
	}
	web.WriteJSON(w, http.StatusOK, map[string]any{"Contents": out, "Name": name})
	return nil
}

func epochSeconds(t time.Time) float64 { return float64(t.UnixMicro()) / 1e6 }

func artifactsQuery(_ http.ResponseWriter, r *http.Request, ps httprouter.Params) (api.ArtifactsQuery, error) {
	attempt, err := attemptParam(r)
	return api.ArtifactsQuery{JobID: ps.ByName("job_id"), Attempt: attempt}, err
}

// Artifacts lists a job's artifacts: every attempt's, newest attempt first,
// or one attempt's.
func (s *Server) Artifacts(ctx context.Context, q api.ArtifactsQuery) (api.JobArtifacts, error) {
	if _, err := authorize(ctx, auth.ScopeQueueView); err != nil {
		return api.JobArtifacts{}, err
	}
	a, err := s.artifactStore()
	if err != nil {
		return api.JobArtifacts{}, err
	}
	j, err := s.loadJob(ctx, q.JobID)
	if err != nil {
		return api.JobArtifacts{}, err
	}
	objs, err := a.List(ctx, j.ID, q.Attempt)
	if err != nil {
		return api.JobArtifacts{}, s.artifactError(err)
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
func (s *Server) downloadArtifact(w http.ResponseWriter, r *http.Request, ps httprouter.Params, _ auth.Principal) error {
	a, err := s.artifactStore()
	if err != nil {
		return err
	}
	j, err := s.loadJob(r.Context(), ps.ByName("job_id"))
	if err != nil {
		return err
	}
	p := strings.TrimPrefix(ps.ByName("path"), "/")
	bucket, key, err := artifacts.SplitPath(p)
	if err != nil {
		return s.artifactError(err)
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
		rd, obj, err := a.Open(r.Context(), artifacts.Ref{JobID: j.ID, Attempt: n, Bucket: bucket, Key: key})
		if errors.Is(err, artifacts.ErrNotFound) {
			continue
		}
		if err != nil {
			return s.artifactError(err)
		}
		defer rd.Close()
		w.Header().Set("X-Artifact-Attempt", strconv.Itoa(n))
		serveArtifact(w, r, rd, obj)
		return nil
	}
	return web.NotFound("artifact not found: %s (job %s)", p, j.ID)
}

// serveArtifact answers GET and HEAD, whole or by Range. Artifacts are
// served as opaque downloads: never sniffed or rendered, so an uploaded HTML
// file cannot run as a page of the orchestrator's origin.
func serveArtifact(w http.ResponseWriter, r *http.Request, rd io.ReadSeeker, obj artifacts.Object) {
	h := w.Header()
	h.Set("Content-Type", "application/octet-stream")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Content-Disposition", mime.FormatMediaType("attachment", map[string]string{"filename": path.Base(obj.Path)}))
	h.Set("Cache-Control", "private, no-cache")
	if et := obj.ETag(); et != "" {
		h.Set("ETag", et)
	}
	if obj.SHA256 != "" {
		h.Set(api.ArtifactSHA256Header, obj.SHA256)
	}
	http.ServeContent(w, r, "", obj.Modified, rd)
}

func (m *Metrics) writeArtifacts(counter func(name, help string, v int64)) {
	counter("simpletuner_artifact_uploads_total", "Artifact objects stored.", m.artifacts.uploads.Load())
	counter("simpletuner_artifact_upload_bytes_total", "Bytes of artifact objects stored.", m.artifacts.bytes.Load())
	counter("simpletuner_artifact_uploads_too_large_total", "Artifact uploads refused for passing max_object_bytes or max_job_bytes.", m.artifacts.refusals.Load())
}
