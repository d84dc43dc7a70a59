package rpc

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/julienschmidt/httprouter"

	"github.com/simpletuner/simpletuner-orchestration/internal/api"
	"github.com/simpletuner/simpletuner-orchestration/internal/artifacts"
	"github.com/simpletuner/simpletuner-orchestration/internal/auth"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator/authn"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator/diskfull"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator/metrics"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator/web"
	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
	"github.com/simpletuner/simpletuner-orchestration/internal/store"
)

// Artifacts: a running job publishes files S3-style under /api/cloud/storage
// with its attempt's upload token; admins (queue.view) list and download
// them under /api/queue/{id}/artifacts (package adminapi).

// Uploads serves a job's own uploads and checkpoints, authenticated by
// its attempt's upload token and fenced on the attempt as reports are.
type Uploads struct {
	Store   UploadStore
	Authn   *authn.Authenticator
	Errors  *web.Errors
	Log     *slog.Logger
	Metrics *metrics.Metrics
	// Artifacts is where the uploads go; nil while none is set.
	Artifacts func() *artifacts.Store
	Options   func() Options
}

// UploadStore is what the uploads read and write of the store.
type UploadStore interface {
	GetJob(ctx context.Context, id string) (store.Job, error)
	GetAttemptByUploadTokenHash(ctx context.Context, hash string) (store.Attempt, error)
	PutCheckpoint(ctx context.Context, c store.Checkpoint, keep int) (forgotten []store.Checkpoint, err error)
	ListCheckpoints(ctx context.Context, jobID string) ([]store.Checkpoint, error)
}

// Routes lists a job's own endpoints.
func (s *Uploads) Routes() []web.Route {
	return []web.Route{
		// S3-style uploads. Keys hold slashes, hence the catch-all.
		web.NewRoute("GET", "/api/cloud/storage", "", s.upload(s.listBuckets)),
		web.NewRoute("GET", "/api/cloud/storage/:bucket", "", s.upload(s.listObjects)),
		web.NewRoute("PUT", "/api/cloud/storage/:bucket/*key", "PUT /api/cloud/storage/{bucket}/{key}", s.upload(s.putObject)),
		web.NewRoute("GET", "/api/cloud/storage/:bucket/*key", "GET /api/cloud/storage/{bucket}/{key}", s.upload(s.getObject)),
		web.NewRoute("HEAD", "/api/cloud/storage/:bucket/*key", "HEAD /api/cloud/storage/{bucket}/{key}", s.upload(s.getObject)),
		// The job's checkpoints (p2): complete ones listed and read by any
		// attempt of the job, committed and aborted by the one that uploaded.
		web.NewRoute("GET", "/api/cloud/checkpoints", "", s.upload(s.listCheckpoints)),
		web.NewRoute("POST", "/api/cloud/checkpoints", "", s.upload(s.commitCheckpoint)),
		web.NewRoute("DELETE", "/api/cloud/checkpoints/:name", "", s.upload(s.abortCheckpoint)),
		web.NewRoute("GET", "/api/cloud/checkpoints/:attempt/:name/*path", "GET /api/cloud/checkpoints/{attempt}/{name}/{path}", s.upload(s.checkpointFile)),
	}
}

// decodeJSON reads a JSON object body into v (web.ReadJSON, within the
// configured body limit).
func (s *Uploads) decodeJSON(w http.ResponseWriter, r *http.Request, v any) error {
	_, err := web.ReadJSON(w, r, s.Options().MaxBodyBytes, v)
	return err
}

// ArtifactStore is where jobs' uploads go; an error (503) while none is set.
func (s *Uploads) ArtifactStore() (*artifacts.Store, error) {
	a := s.Artifacts()
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
func (s *Uploads) upload(h uploadHandler) httprouter.Handle {
	return func(w http.ResponseWriter, r *http.Request, ps httprouter.Params) {
		a, err := s.ArtifactStore()
		if err != nil {
			s.Errors.Write(w, r, err)
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
			s.Errors.Write(w, r, web.Errorf(http.StatusUnauthorized, protocol.CodeUnauthorized, "%s", detail))
			return
		}
		// As for other credentials: a blocked peer's garbage costs no lookup,
		// a token of the right shape always gets one.
		c := authn.PresenterOf(r)
		if err := s.Authn.Limited(c, token, uploadTokenShape(token)); err != nil {
			s.Errors.Write(w, r, err)
			return
		}
		hash := auth.Hash(token)
		att, err := s.Store.GetAttemptByUploadTokenHash(r.Context(), hash)
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			s.Errors.Write(w, r, err)
			return
		}
		if err != nil || !auth.Equal(att.UploadTokenHash, hash) {
			why := "it belongs to no job attempt"
			if !uploadTokenShape(token) {
				why = "an upload token starts with " + uploadPrefix + " (it is in $SIMPLETUNER_UPLOAD_TOKEN)"
			}
			s.Errors.Write(w, r, s.Authn.Refused(c, token, protocol.CodeInvalidToken, "Invalid upload token: "+why))
			return
		}
		j, err := s.Store.GetJob(r.Context(), att.JobID)
		if err != nil {
			s.Errors.Write(w, r, err)
			return
		}
		if err := s.mayUpload(j, att, time.Now()); err != nil {
			s.Errors.Write(w, r, err)
			return
		}
		if err := h(w, r, ps, uploader{job: j, attempt: att}, a); err != nil {
			s.Errors.Write(w, r, err)
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
func (s *Uploads) mayUpload(j store.Job, a store.Attempt, now time.Time) error {
	if j.Attempt != a.Number {
		s.Metrics.StaleRejections.Add(1)
		s.Log.Info("stale upload refused", "job_id", j.ID, "attempt", a.Number, "current_attempt", j.Attempt)
		return web.Errorf(http.StatusConflict, protocol.CodeStaleAttempt,
			"attempt %d of job %s has been replaced by attempt %d; its upload token no longer works", a.Number, j.ID, j.Attempt)
	}
	grace := s.Options().ArtifactUploadGrace
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
func (s *Uploads) stillCurrent(ctx context.Context, u uploader) func() error {
	return func() error {
		j, err := s.Store.GetJob(ctx, u.job.ID)
		if err != nil {
			return err
		}
		if j.Attempt != u.attempt.Number {
			return s.mayUpload(j, u.attempt, time.Now())
		}
		return nil
	}
}

// ArtifactError maps the store's errors onto HTTP answers.
func (s *Uploads) ArtifactError(err error) error {
	if tl := (*artifacts.TooLargeError)(nil); errors.As(err, &tl) {
		s.Metrics.ArtifactTooLarge()
	}
	return web.ArtifactError(s.Log, err)
}

func (s *Uploads) putObject(w http.ResponseWriter, r *http.Request, ps httprouter.Params, u uploader, a *artifacts.Store) error {
	ref := artifacts.Ref{JobID: u.job.ID, Attempt: u.attempt.Number, Bucket: ps.ByName("bucket"),
		Key: strings.TrimPrefix(ps.ByName("key"), "/")}
	if err := ref.Validate(); err != nil {
		return s.ArtifactError(err)
	}
	obj, err := a.Put(r.Context(), ref, r.Body, r.ContentLength, s.stillCurrent(r.Context(), u))
	if err != nil {
		var ae *api.Error
		if errors.As(err, &ae) {
			return ae // the attempt was replaced meanwhile
		}
		if !diskfull.IsNoSpace(err) { // a full disk is logged once, not per upload
			s.Log.Info("artifact upload failed", "job_id", ref.JobID, "attempt", ref.Attempt, "path", ref.Path(), "err", err)
		}
		return s.ArtifactError(err)
	}
	s.Metrics.ArtifactStored(obj.Size)
	s.Log.Info("artifact stored", "job_id", ref.JobID, "attempt", ref.Attempt, "path", ref.Path(), "bytes", obj.Size, "sha256", obj.SHA256)
	w.Header().Set("ETag", obj.ETag())
	web.WriteJSON(w, http.StatusOK, map[string]any{"ETag": obj.ETag(), "Key": ref.Key, "Bucket": ref.Bucket,
		"Size": obj.Size, "SHA256": obj.SHA256})
	return nil
}

// getObject serves one of the attempt's own objects (a client checking what
// it uploaded); a trailing "/" lists the bucket instead.
func (s *Uploads) getObject(w http.ResponseWriter, r *http.Request, ps httprouter.Params, u uploader, a *artifacts.Store) error {
	key := strings.TrimPrefix(ps.ByName("key"), "/")
	if key == "" {
		return s.listObjects(w, r, ps, u, a)
	}
	ref := artifacts.Ref{JobID: u.job.ID, Attempt: u.attempt.Number, Bucket: ps.ByName("bucket"), Key: key}
	rd, obj, err := a.Open(r.Context(), ref)
	if err != nil {
		return s.ArtifactError(err)
	}
	defer rd.Close()
	web.ServeArtifact(w, r, rd, obj)
	return nil
}

// listBuckets lists the attempt's buckets with their sizes, newest first.
func (s *Uploads) listBuckets(w http.ResponseWriter, r *http.Request, _ httprouter.Params, u uploader, a *artifacts.Store) error {
	objs, err := a.List(r.Context(), u.job.ID, u.attempt.Number)
	if err != nil {
		return s.ArtifactError(err)
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
func (s *Uploads) listObjects(w http.ResponseWriter, r *http.Request, ps httprouter.Params, u uploader, a *artifacts.Store) error {
	name := ps.ByName("bucket")
	if err := artifacts.ValidateBucket(name); err != nil {
		return s.ArtifactError(err)
	}
	objs, err := a.List(r.Context(), u.job.ID, u.attempt.Number)
	if err != nil {
		return s.ArtifactError(err)
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
