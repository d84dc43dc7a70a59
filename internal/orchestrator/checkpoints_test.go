package orchestrator_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/artifacts"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator/orchtest"
	"github.com/simpletuner/simpletuner-orchestration/internal/store"
	"github.com/simpletuner/simpletuner-orchestration/internal/testutil"
)

// uploadCheckpoint uploads files (path → bytes) of a checkpoint with token
// and returns the commit that lists them.
func (e *env) uploadCheckpoint(token, name string, step int64, files map[string][]byte) map[string]any {
	e.t.Helper()
	var list []map[string]any
	paths := make([]string, 0, len(files))
	for p := range files {
		paths = append(paths, p)
	}
	slices.Sort(paths)
	for _, p := range paths {
		b := files[p]
		e.Must(e.put(token, "checkpoints/"+name+"/"+p, bytes.NewReader(b), int64(len(b))), 200)
		list = append(list, map[string]any{"path": p, "size": len(b), "sha256": sha256Hex(b)})
	}
	return map[string]any{"name": name, "step": step, "files": list, "keep": 2}
}

// artifactDir is where the local artifact backend keeps objects.
func (e *env) artifactDir() string {
	return e.artifactStore().Backend().(*artifacts.Local).Dir()
}

func (e *env) commit(token string, body map[string]any) orchtest.Reply {
	e.t.Helper()
	return e.Do("POST", "/api/cloud/checkpoints", map[string]string{"X-Upload-Token": token}, body)
}

func storedNames(e *env) string {
	var out []string
	for _, n := range e.stored() {
		if strings.Contains(n, "/checkpoints/") && !strings.Contains(n, "/.meta/") {
			out = append(out, n[strings.Index(n, "/")+1:])
		}
	}
	slices.Sort(out)
	return strings.Join(out, " ")
}

// A checkpoint is complete only once its commit matches what was stored; the
// job shows its newest one; a retry lists and reads the earlier attempt's;
// the newest keep are kept and the files of the others deleted.
func TestCheckpointCommitAndRetry(t *testing.T) {
	forEachStore(t, func(t *testing.T, open func(testing.TB) store.Store) {
		e := setup(t, open(t), func(o *orchestrator.Options) { o.ArtifactUploadGrace = time.Hour })
		a := e.quietAgent("first")
		jobID := e.Submit(map[string]any{})
		ev := a.take(jobID)
		if ev["checkpoints_endpoint"] != "/api/cloud/checkpoints" {
			t.Fatalf("job_submit: %v", ev)
		}
		token := ev["upload_token"].(string)
		up := map[string]string{"X-Upload-Token": token}
		list := e.Must(e.Do("GET", "/api/cloud/checkpoints", up, nil), 200).JSON
		if cs := list["checkpoints"].([]any); len(cs) != 0 || list["max_job_bytes"] == float64(0) {
			t.Fatalf("empty list: %v", list)
		}

		model := randomBytes(t, 1<<20)
		c := e.uploadCheckpoint(token, "checkpoint-10", 10, map[string][]byte{"model.safetensors": model, "sub/state.json": []byte(`{"step":10}`)})
		// A commit that does not match what was stored is refused.
		bad := map[string]any{"name": "checkpoint-10", "step": 10, "keep": 2, "files": []any{
			map[string]any{"path": "model.safetensors", "size": len(model), "sha256": strings.Repeat("0", 64)}}}
		if r := e.commit(token, bad); r.Status != 422 || !strings.Contains(fmt.Sprint(r.JSON["detail"]), "model.safetensors") {
			t.Fatalf("wrong sha256: %d %s", r.Status, r.Body)
		}
		missing := map[string]any{"name": "checkpoint-10", "step": 10, "keep": 2, "files": []any{
			map[string]any{"path": "optimizer.bin", "size": 1, "sha256": strings.Repeat("0", 64)}}}
		if r := e.commit(token, missing); r.Status != 422 || !strings.Contains(fmt.Sprint(r.JSON["detail"]), "not stored") {
			t.Fatalf("missing file: %d %s", r.Status, r.Body)
		}
		e.Must(e.commit(token, map[string]any{"name": "model", "step": 10, "keep": 2, "files": c["files"]}), 422)
		if j := e.Job(jobID); j["checkpoint"] != nil {
			t.Fatalf("an uncommitted checkpoint shows: %v", j["checkpoint"])
		}
		got := e.Must(e.commit(token, c), 201).JSON
		if got["name"] != "checkpoint-10" || got["attempt"] != float64(1) || got["bytes"] != float64(len(model)+11) {
			t.Fatalf("commit answer: %v", got)
		}
		j := e.Job(jobID)
		cp, _ := j["checkpoint"].(map[string]any)
		if cp["name"] != "checkpoint-10" || cp["step"] != float64(10) || len(cp["files"].([]any)) != 2 || j["checkpoints_kept"] != float64(1) {
			t.Fatalf("job view: %v", j)
		}
		// What was uploaded but not committed is deleted on request; a
		// complete checkpoint is not.
		e.uploadCheckpoint(token, "checkpoint-15", 15, map[string][]byte{"model.safetensors": []byte("half")})
		e.Must(e.Do("DELETE", "/api/cloud/checkpoints/checkpoint-15", up, nil), 204)
		e.Must(e.Do("DELETE", "/api/cloud/checkpoints/checkpoint-10", up, nil), 409)
		e.Must(e.Do("DELETE", "/api/cloud/checkpoints/..", up, nil), 422)
		if s := storedNames(e); s != "1/checkpoints/checkpoint-10/model.safetensors 1/checkpoints/checkpoint-10/sub/state.json" {
			t.Fatalf("stored after the abort: %s", s)
		}

		// The attempt is lost; the retry sees attempt 1's checkpoint and
		// reads its files; attempt 1's token no longer works.
		a.silence()
		a.cancel()
		testutil.Eventually(t, eventWait, "attempt lost", func() bool { return e.Job(jobID)["status"] == "queued" })
		b := e.quietAgent("second")
		ev2 := b.take(jobID)
		second := ev2["upload_token"].(string)
		up2 := map[string]string{"X-Upload-Token": second}
		cs := e.Must(e.Do("GET", "/api/cloud/checkpoints", up2, nil), 200).JSON["checkpoints"].([]any)
		if len(cs) != 1 || cs[0].(map[string]any)["attempt"] != float64(1) {
			t.Fatalf("the retry's list: %v", cs)
		}
		if r := e.Must(e.Do("GET", "/api/cloud/checkpoints/1/checkpoint-10/model.safetensors", up2, nil), 200); !bytes.Equal(r.Body, model) {
			t.Fatal("the retry read other bytes")
		}
		e.Must(e.Do("GET", "/api/cloud/checkpoints/1/checkpoint-10/nope", up2, nil), 404)
		e.Must(e.Do("GET", "/api/cloud/checkpoints/1/checkpoint-15/model.safetensors", up2, nil), 404)
		e.Must(e.Do("GET", "/api/cloud/checkpoints/3/checkpoint-10/model.safetensors", up2, nil), 404)
		e.Must(e.Do("GET", "/api/cloud/checkpoints", up, nil), 409)
		e.Must(e.commit(token, c), 409)

		// What attempt 1 uploaded of a checkpoint it never committed (its
		// worker was lost mid-upload) goes with the retry's first commit.
		e.uploadCheckpoint(second, "checkpoint-0", 0, map[string][]byte{"x": []byte("x")}) // the retry's own, uncommitted: stays
		if err := os.MkdirAll(filepath.Join(e.artifactDir(), jobID, "1", "checkpoints", "checkpoint-12"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(e.artifactDir(), jobID, "1", "checkpoints", "checkpoint-12", "half"), []byte("ha"), 0o644); err != nil {
			t.Fatal(err)
		}
		// Two more from the retry with keep 2: attempt 1's goes, files and all.
		e.Must(e.commit(second, e.uploadCheckpoint(second, "checkpoint-20", 20, map[string][]byte{"model.safetensors": []byte("20")})), 201)
		e.Must(e.commit(second, e.uploadCheckpoint(second, "checkpoint-30", 30, map[string][]byte{"model.safetensors": []byte("30")})), 201)
		if s := storedNames(e); s != "2/checkpoints/checkpoint-0/x 2/checkpoints/checkpoint-20/model.safetensors 2/checkpoints/checkpoint-30/model.safetensors" {
			t.Fatalf("stored after keep 2: %s", s)
		}
		if cp := e.Job(jobID)["checkpoint"].(map[string]any); cp["name"] != "checkpoint-30" || cp["attempt"] != float64(2) {
			t.Fatalf("newest: %v", cp)
		}
		if !strings.Contains(e.logs.String(), "checkpoint deleted: past keep_checkpoints") {
			t.Error("no log line for the deleted checkpoint")
		}
	})
}

// A job submitted with checkpoints off gets no checkpoints endpoint, and its
// token cannot commit or list any.
func TestCheckpointsOptOut(t *testing.T) {
	forEachStore(t, func(t *testing.T, open func(testing.TB) store.Store) {
		e := setup(t, open(t))
		a := e.quietAgent("w")
		r := e.AdminDo("POST", "/api/queue/submit", map[string]any{"config": map[string]any{}, "checkpoints": false})
		e.Must(r, 201)
		if r.JSON["warnings"] != nil {
			t.Fatalf("checkpoints taken for an unknown field: %v", r.JSON["warnings"])
		}
		jobID := r.JSON["job_id"].(string)
		ev := a.take(jobID)
		if _, ok := ev["checkpoints_endpoint"]; ok {
			t.Fatalf("job_submit of an opted-out job: %v", ev)
		}
		token := ev["upload_token"].(string)
		c := e.uploadCheckpoint(token, "checkpoint-1", 1, map[string][]byte{"m": []byte("x")})
		e.Must(e.commit(token, c), 409)
		e.Must(e.Do("GET", "/api/cloud/checkpoints", map[string]string{"X-Upload-Token": token}, nil), 409)
		if j := e.Job(jobID); j["checkpoints"] != false {
			t.Fatalf("job view: %v", j["checkpoints"])
		}
		var v map[string]any
		_ = json.Unmarshal(e.Must(e.AdminDo("GET", "/api/queue/"+jobID, nil), 200).Body, &v)
		if _, ok := v["checkpoint"]; ok {
			t.Fatal("an opted-out job shows a checkpoint")
		}
	})
}
