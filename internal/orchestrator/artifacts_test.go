package orchestrator_test

import (
	"bytes"
	"context"
	"crypto/md5"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/artifacts"
	"github.com/simpletuner/simpletuner-orchestration/internal/auth"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator/adminapi"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator/orchtest"
	"github.com/simpletuner/simpletuner-orchestration/internal/store"
	"github.com/simpletuner/simpletuner-orchestration/internal/testutil"
)

// quietAgent registers and connects a worker that sends no heartbeat until
// it holds a job (take): an idle heartbeat racing the dispatch could
// otherwise get the fresh attempt withdrawn on a loaded machine.
func (e *env) quietAgent(name string) *agent {
	e.t.Helper()
	id, token := e.CreateWorker(name, "persistent", nil)
	a := e.newAgent(id, token, 2)
	e.Must(a.register(map[string]any{"name": name}), 200)
	a.connect()
	return a
}

// take waits for the agent's next job, starts it and returns the event.
func (a *agent) take(jobID string) map[string]any {
	a.e.t.Helper()
	ev := a.next("job_submit", eventWait)
	if ev["job_id"] != jobID {
		a.e.t.Fatalf("got job %v, want %s", ev["job_id"], jobID)
	}
	a.e.Must(a.report(jobID, "starting", map[string]any{"attempt": ev["attempt"]}), 200)
	a.keepAlive(a.held)
	return ev
}

// runningJob submits a job, has a fresh agent take it and start it, and
// returns the job id, the agent and the attempt's upload token.
func (e *env) runningJob(name string) (string, *agent, string) {
	e.t.Helper()
	a := e.quietAgent(name)
	jobID := e.Submit(map[string]any{})
	ev := a.take(jobID)
	return jobID, a, ev["upload_token"].(string)
}

// put uploads body with the upload token; size -1 sends it chunked.
func (e *env) put(token, path string, body io.Reader, size int64) orchtest.Reply {
	e.t.Helper()
	req, err := http.NewRequest("PUT", e.URL+"/api/cloud/storage/"+path, body)
	if err != nil {
		e.t.Fatal(err)
	}
	req.ContentLength = size
	if token != "" {
		req.Header.Set("X-Upload-Token", token)
	}
	return e.Send(req)
}

// rawPath sends a request whose path is written exactly as given, so that
// "..", "//" and escapes reach the server unnormalised.
func (e *env) rawPath(method, path, token string, body []byte) orchtest.Reply {
	e.t.Helper()
	u, _ := url.Parse(e.URL)
	req := &http.Request{Method: method, URL: &url.URL{Scheme: "http", Host: u.Host, Opaque: path},
		Header: http.Header{"X-Upload-Token": {token}}, Body: io.NopCloser(bytes.NewReader(body)),
		ContentLength: int64(len(body)), Host: u.Host}
	return e.Send(req)
}

func (e *env) artifactStore() *artifacts.Store { return e.srv.Artifacts() }

// stored lists every name the artifact backend holds, temporary files included.
func (e *env) stored() []string {
	e.t.Helper()
	entries, err := e.artifactStore().Backend().List(context.Background(), "")
	if err != nil {
		e.t.Fatal(err)
	}
	var out []string
	for _, en := range entries {
		out = append(out, en.Name)
	}
	return out
}

func randomBytes(t testing.TB, n int) []byte {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return b
}

func md5Hex(b []byte) string    { s := md5.Sum(b); return hex.EncodeToString(s[:]) }
func sha256Hex(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:]) }

func TestArtifactUploadAndDownload(t *testing.T) {
	forEachStore(t, func(t *testing.T, open func(testing.TB) store.Store) {
		e := setup(t, open(t))
		jobID, _, token := e.runningJob("gpu")
		data := randomBytes(t, 3<<20+17)
		r := e.Must(e.put(token, "outputs/checkpoints/step-100/model.safetensors", bytes.NewReader(data), int64(len(data))), 200)
		etag := `"` + md5Hex(data) + `"`
		if r.Header.Get("ETag") != etag || r.JSON["ETag"] != etag || r.JSON["Key"] != "checkpoints/step-100/model.safetensors" ||
			r.JSON["Bucket"] != "outputs" || r.JSON["SHA256"] != sha256Hex(data) {
			t.Fatalf("PUT answer: %v %v", r.Header, r.JSON)
		}
		// X-SimpleTuner-Secret works too, and chunked bodies.
		req, _ := http.NewRequest("PUT", e.URL+"/api/cloud/storage/outputs/final.txt", io.MultiReader(strings.NewReader("fin")))
		req.Header.Set("X-SimpleTuner-Secret", token)
		e.Must(e.Send(req), 200)

		// The job reads back what it uploaded, in upstream's shapes.
		up := map[string]string{"X-Upload-Token": token}
		if got := e.Must(e.Do("GET", "/api/cloud/storage/outputs/checkpoints/step-100/model.safetensors", up, nil), 200); !bytes.Equal(got.Body, data) {
			t.Fatal("GET returned other bytes")
		}
		buckets := e.Must(e.Do("GET", "/api/cloud/storage", up, nil), 200).JSON
		bl := buckets["Buckets"].([]any)
		if len(bl) != 1 || bl[0].(map[string]any)["Name"] != "outputs" || bl[0].(map[string]any)["FileCount"] != float64(2) ||
			buckets["total_size"] != float64(len(data)+3) {
			t.Fatalf("buckets: %v", buckets)
		}
		objects := e.Must(e.Do("GET", "/api/cloud/storage/outputs", up, nil), 200).JSON
		if c := objects["Contents"].([]any); objects["Name"] != "outputs" || len(c) != 2 || c[0].(map[string]any)["Key"] != "checkpoints/step-100/model.safetensors" {
			t.Fatalf("objects: %v", objects)
		}
		e.Must(e.Do("GET", "/api/cloud/storage/outputs/missing.bin", up, nil), 404)

		// Admins list and download, whole or by range.
		list := e.Must(e.AdminDo("GET", "/api/queue/"+jobID+"/artifacts", nil), 200).JSON
		arts := list["artifacts"].([]any)
		first := arts[0].(map[string]any)
		if len(arts) != 2 || list["total_bytes"] != float64(len(data)+3) || first["path"] != "outputs/checkpoints/step-100/model.safetensors" ||
			first["sha256"] != sha256Hex(data) || first["attempt"] != float64(1) || first["size"] != float64(len(data)) {
			t.Fatalf("admin list: %v", list)
		}
		path := "/api/queue/" + jobID + "/artifacts/outputs/checkpoints/step-100/model.safetensors"
		whole := e.Must(e.AdminDo("GET", path, nil), 200)
		if !bytes.Equal(whole.Body, data) || whole.Header.Get("ETag") != etag || whole.Header.Get("Accept-Ranges") != "bytes" ||
			whole.Header.Get("X-Artifact-Sha256") != sha256Hex(data) || whole.Header.Get("Content-Type") != "application/octet-stream" {
			t.Fatalf("download: %d bytes, headers %v", len(whole.Body), whole.Header)
		}
		// What curl -C - sends after a broken download: the rest, if unchanged.
		part := e.Must(e.Do("GET", path, map[string]string{"Authorization": "Bearer " + e.Admin,
			"Range": "bytes=1000000-", "If-Range": etag}, nil), 206)
		if !bytes.Equal(part.Body, data[1000000:]) || part.Header.Get("Content-Range") != fmt.Sprintf("bytes 1000000-%d/%d", len(data)-1, len(data)) {
			t.Fatalf("range: %d bytes, %v", len(part.Body), part.Header)
		}
		if head := e.Must(e.Do("HEAD", path, map[string]string{"Authorization": "Bearer " + e.Admin}, nil), 200); head.Header.Get("Content-Length") != fmt.Sprint(len(data)) {
			t.Fatalf("HEAD: %v", head.Header)
		}
		e.Must(e.Do("GET", path, map[string]string{"Authorization": "Bearer " + e.Admin, "Range": fmt.Sprintf("bytes=%d-", len(data))}, nil), 416)
		e.Must(e.AdminDo("GET", "/api/queue/"+jobID+"/artifacts/outputs/nope", nil), 404)
		e.Must(e.AdminDo("GET", "/api/queue/"+jobID+"/artifacts/outputs/final.txt?attempt=2", nil), 404)
		e.Must(e.AdminDo("GET", "/api/queue/j_nosuchjob/artifacts", nil), 404)
		e.Must(e.AdminDo("GET", "/api/queue/"+jobID+"/artifacts?attempt=zero", nil), 422)

		// queue.view is the scope that reads them; the fixed queue routes still work.
		viewer := e.token("viewer", auth.ScopeQueueView)
		submitter := e.token("submitter", auth.ScopeQueueSubmit)
		e.Must(e.Do("GET", path, map[string]string{"X-API-Key": viewer}, nil), 200)
		e.Must(e.Do("GET", path, map[string]string{"X-API-Key": submitter}, nil), 403)
		e.Must(e.Do("GET", "/api/queue/"+jobID+"/artifacts", nil, nil), 401)
		e.Must(e.AdminDo("GET", "/api/queue/stats", nil), 200)
		e.Job(jobID)
	})
}

func (e *env) token(name string, scopes ...string) string {
	e.t.Helper()
	tok, token, err := adminapi.NewAdminToken(name, scopes)
	if err != nil {
		e.t.Fatal(err)
	}
	if err := e.st.CreateAdminToken(context.Background(), tok, nil); err != nil {
		e.t.Fatal(err)
	}
	return token
}

func TestArtifactTokens(t *testing.T) {
	forEachStore(t, func(t *testing.T, open func(testing.TB) store.Store) {
		e := setup(t, open(t))
		_, _, token := e.runningJob("gpu")
		for _, tc := range []struct {
			header map[string]string
			status int
			detail string
		}{
			{nil, 401, "send the job's upload token"},
			{map[string]string{"Authorization": "Bearer " + e.Admin}, 401, "/api/queue/{job_id}/artifacts"},
			{map[string]string{"X-Upload-Token": "stu_" + strings.Repeat("A", 43)}, 401, "belongs to no job attempt"},
			{map[string]string{"X-Upload-Token": e.Admin}, 401, "starts with stu_"},
		} {
			r := e.Do("PUT", "/api/cloud/storage/out/x", tc.header, "data")
			if r.Status != tc.status || !strings.Contains(fmt.Sprint(r.JSON["detail"]), tc.detail) {
				t.Errorf("%v: %d %s", tc.header, r.Status, r.Body)
			}
			if strings.Contains(string(r.Body), token) {
				t.Fatal("a reply shows the token")
			}
		}
		if got := e.stored(); len(got) != 0 {
			t.Fatalf("stored: %v", got)
		}
		if strings.Contains(e.logs.String(), token) {
			t.Fatal("the log shows the upload token")
		}
	})
}

// A replaced attempt's token is stale at once (409), as its reports are;
// the new attempt's token works.
func TestArtifactStaleAttempt(t *testing.T) {
	forEachStore(t, func(t *testing.T, open func(testing.TB) store.Store) {
		e := setup(t, open(t), func(o *orchestrator.Options) { o.ArtifactUploadGrace = time.Hour })
		jobID, lost, first := e.runningJob("lost")
		e.Must(e.put(first, "out/a", strings.NewReader("one"), 3), 200)
		lost.silence()
		lost.cancel()
		testutil.Eventually(t, eventWait, "attempt lost", func() bool { return e.Job(jobID)["status"] == "queued" })
		// Lost but not yet replaced: its grace still holds.
		e.Must(e.put(first, "out/b", strings.NewReader("two"), 3), 200)
		second := e.quietAgent("second")
		ev := second.take(jobID)
		if ev["attempt"] != float64(2) {
			t.Fatalf("second dispatch: %v", ev)
		}
		r := e.put(first, "out/c", strings.NewReader("three"), 5)
		if r.Status != 409 || r.JSON["error"] != "stale_attempt" || !strings.Contains(r.JSON["detail"].(string), "replaced by attempt 2") {
			t.Fatalf("stale upload: %d %s", r.Status, r.Body)
		}
		e.Must(e.Do("GET", "/api/cloud/storage", map[string]string{"X-Upload-Token": first}, nil), 409)
		e.Must(e.put(ev["upload_token"].(string), "out/c", strings.NewReader("three"), 5), 200)
		list := e.Must(e.AdminDo("GET", "/api/queue/"+jobID+"/artifacts", nil), 200).JSON["artifacts"].([]any)
		var got []string
		for _, a := range list {
			m := a.(map[string]any)
			got = append(got, fmt.Sprintf("%v:%v", m["attempt"], m["path"]))
		}
		if strings.Join(got, ",") != "2:out/c,1:out/a,1:out/b" {
			t.Fatalf("artifacts: %v", got)
		}
		// Without ?attempt the newest copy is served; with it, that attempt's.
		e.Must(e.put(ev["upload_token"].(string), "out/a", strings.NewReader("newer"), 5), 200)
		if b := e.Must(e.AdminDo("GET", "/api/queue/"+jobID+"/artifacts/out/a", nil), 200).Body; string(b) != "newer" {
			t.Fatalf("newest copy: %q", b)
		}
		if b := e.Must(e.AdminDo("GET", "/api/queue/"+jobID+"/artifacts/out/a?attempt=1", nil), 200).Body; string(b) != "one" {
			t.Fatalf("attempt 1's copy: %q", b)
		}
	})
}

// An attempt that has ended may still upload for upload_grace (final weights
// after the completion report); after it the token has expired (401).
func TestArtifactUploadGrace(t *testing.T) {
	forEachStore(t, func(t *testing.T, open func(testing.TB) store.Store) {
		for _, tc := range []struct {
			grace time.Duration
			want  int
		}{{time.Hour, 200}, {time.Millisecond, 401}} {
			e := setup(t, open(t), func(o *orchestrator.Options) { o.ArtifactUploadGrace = tc.grace })
			jobID, a, token := e.runningJob("gpu")
			e.Must(a.report(jobID, "completed", nil), 200)
			if tc.want == 200 {
				e.Must(e.put(token, "out/final.safetensors", strings.NewReader("w"), 1), 200)
				continue
			}
			var r orchtest.Reply
			testutil.Eventually(t, eventWait, "token expired", func() bool {
				r = e.put(token, "out/final.safetensors", strings.NewReader("w"), 1)
				return r.Status == 401
			})
			if !strings.Contains(r.JSON["detail"].(string), "has expired") {
				t.Fatalf("expired: %s", r.Body)
			}
		}
	})
}

// Every way out of the job's tree is refused and stores nothing: "..",
// absolute keys, NUL, backslashes, bad buckets, and symbolic links.
func TestArtifactKeyEscapes(t *testing.T) {
	forEachStore(t, func(t *testing.T, open func(testing.TB) store.Store) {
		e := setup(t, open(t))
		jobID, _, token := e.runningJob("gpu")
		for _, p := range []string{
			"/api/cloud/storage/out/../../../etc/passwd",
			"/api/cloud/storage/out/a/../../x",
			"/api/cloud/storage/out/%2e%2e/%2e%2e/x",
			"/api/cloud/storage/out/..%2f..%2fx",
			"/api/cloud/storage/..//x",
			"/api/cloud/storage/%2e%2e/x",
			"/api/cloud/storage/out//etc/passwd",
			"/api/cloud/storage/out/a%00b",
			"/api/cloud/storage/out/..%5c..%5cx",
			"/api/cloud/storage/out/a%5cb",
			"/api/cloud/storage/out/a/./b",
			"/api/cloud/storage/out/",
			"/api/cloud/storage/.meta/x",
		} {
			r := e.rawPath("PUT", p, token, []byte("evil"))
			if r.Status != 400 && r.Status != 404 && r.Status != 405 {
				t.Errorf("PUT %s: %d %s", p, r.Status, r.Body)
			}
		}
		if got := e.stored(); len(got) != 0 {
			t.Fatalf("stored: %v", got)
		}
		// A link planted in the job's tree is never followed.
		e.Must(e.put(token, "out/seed", strings.NewReader("x"), 1), 200)
		outside := t.TempDir()
		dir := e.artifactStore().Backend().(*artifacts.Local).Dir()
		if err := os.Symlink(outside, filepath.Join(dir, jobID, "1", "out", "link")); err != nil {
			t.Fatal(err)
		}
		r := e.put(token, "out/link/pwned", strings.NewReader("evil"), 4)
		if r.Status != 403 || !strings.Contains(r.JSON["detail"].(string), "symbolic link") {
			t.Fatalf("through a link: %d %s", r.Status, r.Body)
		}
		e.Must(e.AdminDo("GET", "/api/queue/"+jobID+"/artifacts/out/link/pwned", nil), 403)
		if entries, _ := os.ReadDir(outside); len(entries) != 0 {
			t.Fatalf("written outside: %v", entries)
		}
		// The admin side refuses the same names.
		for _, p := range []string{"..%2f..%2fx", "out/..%2fx", "out", "out/a%00"} {
			req, _ := http.NewRequest("GET", e.URL+"/api/queue/"+jobID+"/artifacts/"+p, nil)
			req.Header.Set("Authorization", "Bearer "+e.Admin)
			if r := e.Send(req); r.Status != 400 {
				t.Errorf("admin GET %s: %d %s", p, r.Status, r.Body)
			}
		}
	})
}

// Over a limit → 413 and nothing kept, whether the length was announced,
// sent chunked, or the body is cut short of what it announced.
func TestArtifactLimits(t *testing.T) {
	forEachStore(t, func(t *testing.T, open func(testing.TB) store.Store) {
		// Room for three 1 MiB objects, each with what its files and
		// directories are charged.
		e := setup(t, open(t), func(o *orchestrator.Options) {
			o.ArtifactMaxObjectBytes, o.ArtifactMaxJobBytes = 1<<20, 3*artifacts.Charge("out/part-0", 1<<20)
		})
		jobID, _, token := e.runningJob("gpu")
		tooBig := randomBytes(t, 1<<20+1)
		if r := e.put(token, "out/announced", bytes.NewReader(tooBig), int64(len(tooBig))); r.Status != 413 || r.JSON["error"] != "request_too_large" {
			t.Fatalf("announced over the limit: %d %s", r.Status, r.Body)
		}
		if r := e.put(token, "out/chunked", io.MultiReader(bytes.NewReader(tooBig)), -1); r.Status != 413 {
			t.Fatalf("chunked over the limit: %d %s", r.Status, r.Body)
		}
		for i := range 3 {
			e.Must(e.put(token, fmt.Sprintf("out/part-%d", i), bytes.NewReader(tooBig[:1<<20]), 1<<20), 200)
		}
		if r := e.put(token, "out/one-more", strings.NewReader("x"), 1); r.Status != 413 || !strings.Contains(r.JSON["detail"].(string), "max_job_bytes") {
			t.Fatalf("over the job limit: %d %s", r.Status, r.Body)
		}
		// A body that stops short of its Content-Length.
		conn, err := net.Dial("tcp", strings.TrimPrefix(e.URL, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(conn, "PUT /api/cloud/storage/out/part-0 HTTP/1.1\r\nHost: x\r\nX-Upload-Token: %s\r\nContent-Length: 1000\r\n\r\nonly-this", token)
		conn.Close()
		want := []string{jobID + "/1/.meta/out/part-0", jobID + "/1/.meta/out/part-1", jobID + "/1/.meta/out/part-2",
			jobID + "/1/out/part-0", jobID + "/1/out/part-1", jobID + "/1/out/part-2"}
		testutil.Eventually(t, eventWait, "nothing but the three parts", func() bool { return strings.Join(sorted(e.stored()), ",") == strings.Join(want, ",") })
		if b := e.Must(e.AdminDo("GET", "/api/queue/"+jobID+"/artifacts/out/part-0", nil), 200).Body; !bytes.Equal(b, tooBig[:1<<20]) {
			t.Fatal("the cut upload changed part-0")
		}
		if !strings.Contains(metricsText(e.srv), "simpletuner_artifact_uploads_too_large_total 3") {
			t.Fatalf("metrics: %s", metricsText(e.srv))
		}
	})
}

// A connection cut in the middle of a large upload leaves nothing under the
// real name, not even a temporary file.
func TestArtifactCutConnection(t *testing.T) {
	forEachStore(t, func(t *testing.T, open func(testing.TB) store.Store) {
		e := setup(t, open(t))
		jobID, _, token := e.runningJob("gpu")
		conn, err := net.Dial("tcp", strings.TrimPrefix(e.URL, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(conn, "PUT /api/cloud/storage/out/big.bin HTTP/1.1\r\nHost: x\r\nX-Upload-Token: %s\r\nContent-Length: %d\r\n\r\n", token, 64<<20)
		chunk := randomBytes(t, 1<<20)
		for range 8 {
			if _, err := conn.Write(chunk); err != nil {
				t.Fatal(err)
			}
		}
		// The server has the upload in progress: a temporary file exists.
		testutil.Eventually(t, eventWait, "upload in progress", func() bool {
			for _, n := range e.stored() {
				if strings.HasPrefix(n, ".tmp/") {
					return true
				}
			}
			return false
		})
		conn.Close()
		testutil.Eventually(t, eventWait, "nothing left", func() bool { return len(e.stored()) == 0 })
		e.Must(e.AdminDo("GET", "/api/queue/"+jobID+"/artifacts/out/big.bin", nil), 404)
		testutil.Eventually(t, eventWait, "the failed upload logged", func() bool {
			return strings.Contains(e.logs.String(), "artifact upload failed")
		})
	})
}

// genReader yields n pseudo-random bytes without holding them.
type genReader struct {
	n, off int64
	sha    io.Writer
}

func (g *genReader) Read(p []byte) (int, error) {
	if g.off >= g.n {
		return 0, io.EOF
	}
	k := min(int64(len(p)), g.n-g.off)
	for i := range k {
		x := uint64(g.off+i) * 0x9E3779B97F4A7C15
		p[i] = byte(x >> 56)
	}
	g.off += k
	g.sha.Write(p[:k])
	return int(k), nil
}

// A 200 MB upload streams: the orchestrator allocates a small, fixed amount
// whatever the size (it never holds the body), and the stored object's
// checksum matches what was sent. Runs alone (not parallel) so that the
// allocation count is this upload's.
func TestArtifactLargeUploadStreams(t *testing.T) {
	e := setup(t, backends["sqlite"](t))
	_, _, token := e.runningJob("gpu")
	const size = 200 << 20
	sha := sha256.New()
	gen := &genReader{n: size, sha: sha}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	peak := uint64(0)
	done, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
				var m runtime.MemStats
				runtime.ReadMemStats(&m)
				peak = max(peak, m.HeapInuse)
			}
		}
	}()
	r := e.put(token, "out/large.bin", gen, size)
	close(done)
	<-stopped
	runtime.ReadMemStats(&after)
	e.Must(r, 200)
	if r.JSON["SHA256"] != hex.EncodeToString(sha.Sum(nil)) || r.JSON["Size"] != float64(size) {
		t.Fatalf("stored: %v", r.JSON)
	}
	allocated := after.TotalAlloc - before.TotalAlloc
	t.Logf("200 MiB upload: %.1f MiB allocated in total (client and server), heap in use at most %.1f MiB (%.1f before)",
		float64(allocated)/(1<<20), float64(peak)/(1<<20), float64(before.HeapInuse)/(1<<20))
	if allocated > 48<<20 {
		t.Fatalf("the upload allocated %d MiB for a %d MiB body: something holds the body", allocated>>20, size>>20)
	}
}

func sorted(s []string) []string { return slices.Sorted(slices.Values(s)) }

func metricsText(s *orchestrator.Server) string {
	var b bytes.Buffer
	s.WriteMetrics(context.Background(), &b)
	return b.String()
}

// A job cannot fill the artifacts' disk with empty objects under deep keys:
// a key deeper than artifacts.MaxKeyDepth is refused (400), every object is
// charged what its files and directories cost, and a job holds at most
// max_job_objects objects (413).
func TestArtifactQuotaCountsFilesAndDirectories(t *testing.T) {
	t.Parallel()
	e := setup(t, backends["sqlite"](t), func(o *orchestrator.Options) { o.ArtifactMaxJobBytes, o.ArtifactMaxJobObjects = 2<<20, 5 })
	_, _, token := e.runningJob("gpu")
	r := e.put(token, "out/"+strings.Repeat("d/", 199)+"x", strings.NewReader(""), 0)
	if r.Status != 400 || !strings.Contains(r.JSON["detail"].(string), "has 200 segments; at most 16") {
		t.Fatalf("a 200-segment key: %d %s", r.Status, r.Body)
	}
	for i := range 5 {
		e.Must(e.put(token, fmt.Sprintf("out/%d", i), strings.NewReader(""), 0), 200)
	}
	if r := e.put(token, "out/5", strings.NewReader(""), 0); r.Status != 413 || !strings.Contains(r.JSON["detail"].(string), "max_job_objects (5)") {
		t.Fatalf("a sixth object: %d %s", r.Status, r.Body)
	}
	e.Must(e.put(token, "out/0", strings.NewReader("replaced"), 8), 200)
	deep := "out/" + strings.Repeat("d/", artifacts.MaxKeyDepth-1) + "x"
	e.srv.SetOptions(func() orchestrator.Options { o := e.srv.Options(); o.ArtifactMaxJobObjects = 1000; return o }())
	stored := 0
	for i := range 40 {
		if r := e.put(token, fmt.Sprintf("%s%d", deep, i), strings.NewReader(""), 0); r.Status == 200 {
			stored++
		} else if r.Status != 413 || !strings.Contains(r.JSON["detail"].(string), "max_job_bytes") {
			t.Fatalf("deep upload %d: %d %s", i, r.Status, r.Body)
		}
	}
	if want := int((2<<20 - 5*artifacts.Charge("out/0", 0) - 8) / artifacts.Charge(deep, 0)); stored != want {
		t.Errorf("%d empty %d-segment objects stored in a 2 MiB quota; want %d", stored, artifacts.MaxKeyDepth, want)
	}
}
