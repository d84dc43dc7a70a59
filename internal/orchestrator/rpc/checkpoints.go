package rpc

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/julienschmidt/httprouter"

	"github.com/simpletuner/simpletuner-orchestration/internal/artifacts"
	"github.com/simpletuner/simpletuner-orchestration/internal/checkpoint"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator/web"
	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
	"github.com/simpletuner/simpletuner-orchestration/internal/store"
)

// Checkpoints (p2): workerd uploads each file of a finished checkpoint with
// the attempt's upload token to the storage endpoint under
// checkpoints/<name>/<path>, then commits it here. The commit, checked file
// by file against what was stored, is what makes the checkpoint complete: a
// retry of the job lists the complete ones and downloads the newest through
// this endpoint, whichever attempt stored it.

// checkpointsBucket is the bucket checkpoint files are uploaded to.
const checkpointsBucket = "checkpoints"

// CheckpointsEndpoint is what job_submit names for a job whose checkpoints
// the orchestrator keeps, "" for one it keeps none of.
func (s *Uploads) CheckpointsEndpoint(j store.Job) string {
	if j.NoCheckpoints || s.Artifacts() == nil {
		return ""
	}
	return "/api/cloud/checkpoints"
}

func (s *Uploads) checkpointsKept(u uploader) error {
	if u.job.NoCheckpoints {
		return web.Conflict("job %s was submitted with checkpoints off; none of its checkpoints are kept", u.job.ID)
	}
	return nil
}

func checkpointView(c store.Checkpoint) protocol.Checkpoint {
	return protocol.Checkpoint{Name: c.Name, Step: c.Step, Attempt: c.Attempt, Bytes: c.Bytes,
		CreatedAt: protocol.Time(c.CreatedAt), Files: c.Files}
}

// checkpointFileRef is where a file of a checkpoint is stored.
func checkpointFileRef(job string, attempt int, name, path string) artifacts.Ref {
	return artifacts.Ref{JobID: job, Attempt: attempt, Bucket: checkpointsBucket, Key: name + "/" + path}
}

// listCheckpoints lists the job's complete checkpoints, newest first, with
// the artifact limits and what the job stores now.
func (s *Uploads) listCheckpoints(w http.ResponseWriter, r *http.Request, _ httprouter.Params, u uploader, a *artifacts.Store) error {
	if err := s.checkpointsKept(u); err != nil {
		return err
	}
	cs, err := s.Store.ListCheckpoints(r.Context(), u.job.ID)
	if err != nil {
		return err
	}
	charged, objects, err := a.JobUsage(r.Context(), u.job.ID)
	if err != nil {
		return s.ArtifactError(err)
	}
	lim := a.Limits()
	out := protocol.CheckpointList{Checkpoints: []protocol.Checkpoint{}, MaxObjectBytes: lim.MaxObjectBytes,
		MaxJobBytes: lim.MaxJobBytes, MaxJobObjects: lim.MaxJobObjects, JobBytes: charged, JobObjects: objects}
	for _, c := range cs {
		out.Checkpoints = append(out.Checkpoints, checkpointView(c))
	}
	web.WriteJSON(w, http.StatusOK, out)
	return nil
}

// commitCheckpoint makes an uploaded checkpoint complete: every file it
// lists must be stored in the attempt's artifacts with that size and
// SHA-256. Then the checkpoint is recorded, and those of the job past the
// newest keep are forgotten and their files deleted.
func (s *Uploads) commitCheckpoint(w http.ResponseWriter, r *http.Request, _ httprouter.Params, u uploader, a *artifacts.Store) error {
	if err := s.checkpointsKept(u); err != nil {
		return err
	}
	var c protocol.CheckpointCommit
	if err := s.decodeJSON(w, r, &c); err != nil {
		return err
	}
	if err := checkpoint.ValidateCommit(c); err != nil {
		return web.Invalid("checkpoint commit: %v", err)
	}
	for _, f := range c.Files {
		ref := checkpointFileRef(u.job.ID, u.attempt.Number, c.Name, f.Path)
		if err := ref.Validate(); err != nil {
			return web.Invalid("checkpoint %s: file %q: %v", c.Name, f.Path, err)
		}
		obj, err := a.Describe(r.Context(), ref)
		switch {
		case errors.Is(err, artifacts.ErrNotFound):
			return web.Invalid("checkpoint %s: file %q is not stored (upload it to %s/%s first)", c.Name, f.Path, "/api/cloud/storage", ref.Path())
		case err != nil:
			return s.ArtifactError(err)
		case obj.Size != f.Size || obj.SHA256 != f.SHA256:
			return web.Invalid("checkpoint %s: file %q is stored with %d bytes and SHA-256 %q, not %d bytes and %s",
				c.Name, f.Path, obj.Size, obj.SHA256, f.Size, f.SHA256)
		}
	}
	cp := store.Checkpoint{JobID: u.job.ID, Attempt: u.attempt.Number, Name: c.Name, Step: c.Step,
		Bytes: checkpoint.Bytes(c.Files), Files: c.Files, CreatedAt: time.Now()}
	forgotten, err := s.Store.PutCheckpoint(r.Context(), cp, c.Keep)
	if err != nil {
		return err
	}
	s.Log.Info("checkpoint complete", "job_id", cp.JobID, "attempt", cp.Attempt, "name", cp.Name, "step", cp.Step,
		"bytes", cp.Bytes, "files", len(cp.Files))
	for _, old := range forgotten {
		ref := artifacts.Ref{JobID: old.JobID, Attempt: old.Attempt, Bucket: checkpointsBucket, Key: old.Name}
		if err := a.DeleteTree(r.Context(), ref); err != nil {
			s.Log.Warn("a checkpoint past keep_checkpoints was forgotten but its files stay", "job_id", old.JobID,
				"attempt", old.Attempt, "name", old.Name, "err", err)
			continue
		}
		s.Log.Info("checkpoint deleted: past keep_checkpoints", "job_id", old.JobID, "attempt", old.Attempt, "name", old.Name, "keep", c.Keep)
	}
	cs, err := s.Store.ListCheckpoints(r.Context(), u.job.ID)
	if err != nil {
		return err
	}
	for _, got := range cs {
		if got.Attempt == cp.Attempt && got.Name == cp.Name {
			cp = got
		}
	}
	s.sweepAbandoned(r.Context(), a, u, cs)
	web.WriteJSON(w, http.StatusCreated, checkpointView(cp))
	return nil
}

// sweepAbandoned deletes what earlier attempts of the job uploaded of
// checkpoints they never committed (a worker lost in the middle of an
// upload): their tokens are stale, so those can never become complete, and
// they would count against the job's quota for ever.
func (s *Uploads) sweepAbandoned(ctx context.Context, a *artifacts.Store, u uploader, committed []store.Checkpoint) {
	dirs, err := a.Dirs(ctx, u.job.ID, checkpointsBucket)
	if err != nil {
		s.Log.Warn("cannot list the job's checkpoint uploads", "job_id", u.job.ID, "err", err)
		return
	}
	for _, d := range dirs {
		if d.Attempt >= u.attempt.Number ||
			slices.ContainsFunc(committed, func(c store.Checkpoint) bool { return c.Attempt == d.Attempt && c.Name == d.Name }) {
			continue
		}
		ref := artifacts.Ref{JobID: u.job.ID, Attempt: d.Attempt, Bucket: checkpointsBucket, Key: d.Name}
		if err := a.DeleteTree(ctx, ref); err != nil {
			s.Log.Warn("cannot delete an abandoned checkpoint upload", "job_id", u.job.ID, "attempt", d.Attempt, "name", d.Name, "err", err)
			continue
		}
		s.Log.Info("abandoned checkpoint upload deleted", "job_id", u.job.ID, "attempt", d.Attempt, "name", d.Name)
	}
}

// abortCheckpoint deletes what the attempt uploaded of a checkpoint it did
// not commit (the trainer pruned it meanwhile, the job's quota was reached).
func (s *Uploads) abortCheckpoint(w http.ResponseWriter, r *http.Request, ps httprouter.Params, u uploader, a *artifacts.Store) error {
	name := ps.ByName("name")
	if _, ok := checkpoint.Parse(name); !ok {
		return web.Invalid("%q is not a checkpoint name", name)
	}
	cs, err := s.Store.ListCheckpoints(r.Context(), u.job.ID)
	if err != nil {
		return err
	}
	if slices.ContainsFunc(cs, func(c store.Checkpoint) bool { return c.Attempt == u.attempt.Number && c.Name == name }) {
		return web.Conflict("checkpoint %s of attempt %d is complete; only keep_checkpoints removes it", name, u.attempt.Number)
	}
	if err := a.DeleteTree(r.Context(), artifacts.Ref{JobID: u.job.ID, Attempt: u.attempt.Number, Bucket: checkpointsBucket, Key: name}); err != nil {
		return s.ArtifactError(err)
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// checkpointFile serves one file of a complete checkpoint of the job, from
// whichever of its attempts committed it: a retry restores from it.
func (s *Uploads) checkpointFile(w http.ResponseWriter, r *http.Request, ps httprouter.Params, u uploader, a *artifacts.Store) error {
	if err := s.checkpointsKept(u); err != nil {
		return err
	}
	n, err := strconv.Atoi(ps.ByName("attempt"))
	if err != nil || n < 1 || n > u.job.Attempt {
		return web.NotFound("attempt %q of job %s has no checkpoint", ps.ByName("attempt"), u.job.ID)
	}
	name, path := ps.ByName("name"), strings.TrimPrefix(ps.ByName("path"), "/")
	cs, err := s.Store.ListCheckpoints(r.Context(), u.job.ID)
	if err != nil {
		return err
	}
	i := slices.IndexFunc(cs, func(c store.Checkpoint) bool { return c.Attempt == n && c.Name == name })
	if i < 0 {
		return web.NotFound("%s of attempt %d is not a complete checkpoint of job %s", name, n, u.job.ID)
	}
	if !slices.ContainsFunc(cs[i].Files, func(f protocol.CheckpointFile) bool { return f.Path == path }) {
		return web.NotFound("%s of attempt %d holds no file %q", name, n, path)
	}
	rd, obj, err := a.Open(r.Context(), checkpointFileRef(u.job.ID, n, name, path))
	if err != nil {
		return s.ArtifactError(err)
	}
	defer rd.Close()
	web.ServeArtifact(w, r, rd, obj)
	return nil
}

// LatestCheckpoint is the newest complete checkpoint of a job, for its view;
// nil when it has none.
func (s *Uploads) LatestCheckpoint(ctx context.Context, j store.Job) (*protocol.Checkpoint, int, error) {
	cs, err := s.Store.ListCheckpoints(ctx, j.ID)
	if err != nil || len(cs) == 0 {
		return nil, 0, err
	}
	v := checkpointView(cs[0])
	return &v, len(cs), nil
}
