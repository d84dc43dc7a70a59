package ctl

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The orchestrator's artifact endpoints are being added separately; until
// they exist, downloads are tested against a real HTTP server that serves a
// file the standard way (http.ServeContent: Range, If-Range, 416) and can
// cut a response short, as a dying connection would.

const testJob = "j_aaaaaaaaaaaa"

type artifactServer struct {
	*httptest.Server
	mu       sync.Mutex
	file     string // artifact path inside the job
	content  []byte
	modtime  time.Time
	etag     string
	cutAfter int // > 0: cut the next response after this many body bytes
	ranges   []string
	badSum   bool // announce a SHA-256 the content does not have
}

func newArtifactServer(t *testing.T, file string, size int) *artifactServer {
	s := &artifactServer{file: file, content: randomBytes(size), modtime: time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC), etag: `"v1"`}
	s.Server = httptest.NewServer(s)
	t.Cleanup(s.Close)
	return s
}

func randomBytes(n int) []byte {
	b := make([]byte, n)
	rand.Read(b)
	return b
}

func (s *artifactServer) replace(content []byte, etag string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.content, s.etag, s.modtime = content, etag, s.modtime.Add(time.Hour)
}

func (s *artifactServer) seenRanges() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.ranges...)
}

func (s *artifactServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	content, etag, modtime, cut := s.content, s.etag, s.modtime, s.cutAfter
	s.cutAfter = 0
	want := "/api/queue/" + testJob + "/artifacts/" + s.file
	if r.URL.Path == want {
		s.ranges = append(s.ranges, r.Header.Get("Range"))
	}
	s.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	switch r.URL.Path {
	case want:
		w.Header().Set("ETag", etag)
		sum := sha256.Sum256(content)
		w.Header().Set("X-Artifact-Sha256", hex.EncodeToString(sum[:]))
		if s.badSum {
			w.Header().Set("X-Artifact-Sha256", strings.Repeat("0", 64))
		}
		if cut > 0 {
			w = &cuttingWriter{ResponseWriter: w, left: cut}
		}
		w.Header().Set("Content-Type", "application/octet-stream")
		http.ServeContent(w, r, "", modtime, bytes.NewReader(content))
	case "/api/queue/" + testJob:
		io.WriteString(w, `{"job_id": "`+testJob+`", "status": "completed"}`)
	default:
		w.WriteHeader(http.StatusNotFound)
		fmt.Fprintf(w, `{"detail": "artifact not found: %s", "error": "not_found"}`, r.URL.Path)
	}
}

// cuttingWriter stops writing the body after left bytes; the server then
// closes the connection because the body is shorter than its Content-Length.
type cuttingWriter struct {
	http.ResponseWriter
	left int
}

var errCut = errors.New("cut")

func (c *cuttingWriter) Write(p []byte) (int, error) {
	if c.left <= 0 {
		return 0, errCut
	}
	n := min(len(p), c.left)
	n, err := c.ResponseWriter.Write(p[:n])
	c.left -= n
	if err == nil && n < len(p) {
		err = errCut
	}
	return n, err
}

func download(t *testing.T, s *artifactServer, args ...string) runResult {
	t.Helper()
	return runMain(t, map[string]string{"SIMPLETUNER_URL": s.URL}, "", append([]string{"download", testJob}, args...)...)
}

func TestDownloadResumesAfterABrokenConnection(t *testing.T) {
	s := newArtifactServer(t, "checkpoints/model.safetensors", 300_000)
	s.cutAfter = 70_000
	dest := filepath.Join(t.TempDir(), "model.safetensors")
	r := download(t, s, "checkpoints/model.safetensors", "-O", dest)
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	got, _ := os.ReadFile(dest)
	if !bytes.Equal(got, s.content) {
		t.Fatalf("downloaded %d bytes, differing from the %d served", len(got), len(s.content))
	}
	rs := s.seenRanges()
	if len(rs) != 2 || rs[0] != "" || !strings.HasPrefix(rs[1], "bytes=") || rs[1] == "bytes=0-" {
		t.Fatalf("requests' Range headers: %q", rs)
	}
	if !strings.Contains(r.stderr, "resuming") || !strings.Contains(r.stdout, "saved "+dest) {
		t.Errorf("stdout %q stderr %q", r.stdout, r.stderr)
	}
	if _, err := os.Stat(dest + ".part"); !os.IsNotExist(err) {
		t.Errorf("the .part file is left over: %v", err)
	}
}

func TestDownloadContinuesAnEarlierRunsPartFile(t *testing.T) {
	s := newArtifactServer(t, "output.bin", 100_000)
	dest := filepath.Join(t.TempDir(), "output.bin")
	os.WriteFile(dest+".part", s.content[:40_000], 0o644)
	r := download(t, s, "output.bin", "-O", dest, "-o", "json")
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	got, _ := os.ReadFile(dest)
	if !bytes.Equal(got, s.content) {
		t.Fatal("content differs")
	}
	if rs := s.seenRanges(); len(rs) != 1 || rs[0] != "bytes=40000-" {
		t.Fatalf("Range headers: %q", rs)
	}
	if !strings.Contains(r.stdout, `"resumed_from": 40000`) || !strings.Contains(r.stdout, `"bytes": 100000`) {
		t.Errorf("json: %s", r.stdout)
	}
}

// TestDownloadStartsOverWhenTheFileChanged: after a cut, the retry carries
// If-Range; the file changed meanwhile, so the server sends all of the new
// one and the old bytes are dropped.
func TestDownloadStartsOverWhenTheFileChanged(t *testing.T) {
	s := newArtifactServer(t, "a.bin", 200_000)
	s.cutAfter = 50_000
	fresh := randomBytes(150_000)
	d := &downloader{path: "/api/queue/" + testJob + "/artifacts/a.bin", note: func(string, ...any) { s.replace(fresh, `"v2"`) }}
	a := &app{env: Env{Getenv: func(k string) string {
		return map[string]string{"SIMPLETUNER_URL": s.URL, "HOME": t.TempDir()}[k]
	}}}
	cl, err := a.client()
	if err != nil {
		t.Fatal(err)
	}
	d.cl = cl
	dest := filepath.Join(t.TempDir(), "a.bin")
	res, err := d.toFile(t.Context(), dest)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(dest)
	if !bytes.Equal(got, fresh) || res.size != int64(len(fresh)) || res.resumedFrom != 0 {
		t.Fatalf("got %d bytes (want the new file's %d), result %+v", len(got), len(fresh), res)
	}
}

func TestDownloadAlreadyComplete(t *testing.T) {
	s := newArtifactServer(t, "done.txt", 5000)
	dest := filepath.Join(t.TempDir(), "done.txt")
	os.WriteFile(dest+".part", s.content, 0o644)
	if r := download(t, s, "done.txt", "-O", dest); r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	if got, _ := os.ReadFile(dest); !bytes.Equal(got, s.content) {
		t.Fatal("content differs")
	}
}

func TestDownloadToStdoutAndRefusals(t *testing.T) {
	s := newArtifactServer(t, "dir with space/a#b.txt", 1000)
	r := download(t, s, "dir with space/a#b.txt", "-O", "-")
	if r.code != 0 || r.stdout != string(s.content) {
		t.Fatalf("-O -: exit %d, %d bytes: %s", r.code, len(r.stdout), r.stderr)
	}
	dest := filepath.Join(t.TempDir(), "x")
	os.WriteFile(dest, []byte("mine"), 0o644)
	r = download(t, s, "dir with space/a#b.txt", "-O", dest)
	if r.code != 1 || !strings.Contains(r.stderr, "exists; use --force") {
		t.Fatalf("existing file: %d %q", r.code, r.stderr)
	}
	if r := download(t, s, "dir with space/a#b.txt", "-O", dest, "--force"); r.code != 0 {
		t.Fatalf("--force: %d %q", r.code, r.stderr)
	}
	// A file the job does not have: the server's own 404 detail, exit 3.
	r = download(t, s, "missing.bin", "-O", filepath.Join(t.TempDir(), "m"))
	if r.code != 3 || !strings.Contains(r.stderr, "simpletunerctl download: artifact not found") {
		t.Fatalf("missing artifact: %d %q", r.code, r.stderr)
	}
}

func TestParseContentRange(t *testing.T) {
	for _, tc := range []struct {
		in               string
		start, end, size int64
		ok               bool
	}{
		{"bytes 0-99/100", 0, 99, 100, true},
		{"bytes 40000-99999/100000", 40000, 99999, 100000, true},
		{"bytes 5-9/*", 5, 9, -1, true},
		{"bytes */100", -1, -1, 100, true},
		{"bytes 10-5/100", 0, 0, 0, false},
		{"bytes 0-100/100", 0, 0, 0, false},
		{"bytes 0-1", 0, 0, 0, false},
		{"items 0-1/2", 0, 0, 0, false},
		{"bytes -1-2/3", 0, 0, 0, false},
		{"", 0, 0, 0, false},
	} {
		s, e, z, err := parseContentRange(tc.in)
		if (err == nil) != tc.ok || (tc.ok && (s != tc.start || e != tc.end || z != tc.size)) {
			t.Errorf("%q: %d %d %d %v", tc.in, s, e, z, err)
		}
	}
}

// A DEST.part planted as a symbolic link (or a FIFO, or a hard link to
// someone's file) is refused, and what it points to is left alone.
func TestDownloadRefusesAPlantedPartFile(t *testing.T) {
	s := newArtifactServer(t, "model.bin", 10_000)
	dir := t.TempDir()
	victim := filepath.Join(dir, "victim")
	os.WriteFile(victim, []byte("precious"), 0o644)
	dest := filepath.Join(dir, "model.bin")
	for _, tc := range []struct {
		name, want string
		plant      func() error
	}{
		{"symlink", "is a symbolic link; refusing to write through it", func() error { return os.Symlink(victim, dest+".part") }},
		{"hard link", "has other names (hard links)", func() error { return os.Link(victim, dest+".part") }},
		{"fifo", "is not a regular file", func() error { return syscall.Mkfifo(dest+".part", 0o644) }},
	} {
		os.Remove(dest + ".part")
		if err := tc.plant(); err != nil {
			t.Fatal(err)
		}
		r := download(t, s, "model.bin", "-O", dest)
		if r.code == 0 || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("%s: exit %d %q", tc.name, r.code, r.stderr)
		}
		if got, _ := os.ReadFile(victim); string(got) != "precious" {
			t.Fatalf("%s: the download wrote to the planted file's target: %q", tc.name, got)
		}
		if _, err := os.Stat(dest); err == nil {
			t.Errorf("%s: %s was created", tc.name, dest)
		}
	}
}

// Bytes that do not match the SHA-256 the orchestrator keeps are not saved
// under DEST, and the partial file goes; standard output gets a failing exit.
func TestDownloadVerifiesTheSHA256(t *testing.T) {
	s := newArtifactServer(t, "model.bin", 10_000)
	s.badSum = true
	dest := filepath.Join(t.TempDir(), "model.bin")
	r := download(t, s, "model.bin", "-O", dest)
	if r.code != 1 || !strings.Contains(r.stderr, "does not match the artifact's SHA-256") {
		t.Fatalf("exit %d %q", r.code, r.stderr)
	}
	for _, p := range []string{dest, dest + ".part"} {
		if _, err := os.Stat(p); err == nil {
			t.Errorf("%s is left", p)
		}
	}
	if r := download(t, s, "model.bin", "-O", "-"); r.code != 1 || !strings.Contains(r.stderr, "does not match the artifact's SHA-256") {
		t.Fatalf("to stdout: exit %d %q", r.code, r.stderr)
	}
}
