package artifacts

import (
	"bytes"
	"context"
	"crypto/md5"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

func timeAgo(d time.Duration) time.Time { return time.Now().Add(-d) }

func newLocalStore(t *testing.T, l Limits) (*Store, string) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "artifacts")
	b, err := NewLocal(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return New(b, l), dir
}

var roomy = Limits{MaxObjectBytes: 1 << 30, MaxJobBytes: 1 << 30, MaxJobObjects: 1000}

func ref(key string) Ref { return Ref{JobID: "j_test", Attempt: 1, Bucket: "out", Key: key} }

func hexMD5(b []byte) string    { s := md5.Sum(b); return hex.EncodeToString(s[:]) }
func hexSHA256(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:]) }

func put(t *testing.T, s *Store, r Ref, data []byte) Object {
	t.Helper()
	o, err := s.Put(t.Context(), r, bytes.NewReader(data), int64(len(data)), nil)
	if err != nil {
		t.Fatalf("Put %s: %v", r.Path(), err)
	}
	return o
}

func read(t *testing.T, s *Store, r Ref) ([]byte, Object) {
	t.Helper()
	rd, o, err := s.Open(t.Context(), r)
	if err != nil {
		t.Fatalf("Open %s: %v", r.Path(), err)
	}
	defer rd.Close()
	b, err := io.ReadAll(rd)
	if err != nil {
		t.Fatal(err)
	}
	return b, o
}

// files lists every regular file below dir (relative), the sweep of what a
// test left on disk.
func files(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			rel, _ := filepath.Rel(dir, p)
			out = append(out, rel)
		}
		return nil
	})
	return out
}

func TestPutOpenList(t *testing.T) { forEachBackend(t, roomy, testPutOpenList) }

func testPutOpenList(t *testing.T, s *Store, left func() []string) {
	data := []byte("weights")
	o := put(t, s, ref("ckpt/step-1/model.safetensors"), data)
	if o.Size != 7 || o.MD5 != hexMD5(data) || o.SHA256 != hexSHA256(data) || o.ETag() != `"`+hexMD5(data)+`"` {
		t.Fatalf("Put returned %+v", o)
	}
	got, ro := read(t, s, ref("ckpt/step-1/model.safetensors"))
	if !bytes.Equal(got, data) || ro.MD5 != o.MD5 || ro.SHA256 != o.SHA256 || ro.Size != 7 {
		t.Fatalf("Open: %q %+v", got, ro)
	}
	// The layout is the documented one.
	if got := left(); strings.Join(got, ",") != "j_test/1/.meta/out/ckpt/step-1/model.safetensors,j_test/1/out/ckpt/step-1/model.safetensors" {
		t.Fatalf("stored names: %v", got)
	}
	put(t, s, Ref{JobID: "j_test", Attempt: 2, Bucket: "out", Key: "final.bin"}, []byte("12345"))
	put(t, s, Ref{JobID: "j_other", Attempt: 1, Bucket: "out", Key: "x"}, []byte("x"))
	list, err := s.List(t.Context(), "j_test", 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 || list[0].Attempt != 2 || list[0].Path != "out/final.bin" || list[1].Path != "out/ckpt/step-1/model.safetensors" ||
		list[1].SHA256 != hexSHA256(data) || list[0].Size != 5 {
		t.Fatalf("List: %+v", list)
	}
	if one, _ := s.List(t.Context(), "j_test", 1); len(one) != 1 || one[0].Attempt != 1 {
		t.Fatalf("List attempt 1: %+v", one)
	}
	want := Charge("out/ckpt/step-1/model.safetensors", 7) + Charge("out/final.bin", 5)
	if n, objects, err := s.JobUsage(t.Context(), "j_test"); err != nil || n != want || objects != 2 {
		t.Fatalf("JobUsage = %d bytes, %d objects, %v; want %d, 2", n, objects, err, want)
	}
	// Overwrite replaces bytes and checksums together.
	o2 := put(t, s, ref("ckpt/step-1/model.safetensors"), []byte("new"))
	if _, ro := read(t, s, ref("ckpt/step-1/model.safetensors")); ro.SHA256 != o2.SHA256 || ro.Size != 3 {
		t.Fatalf("after overwrite: %+v", ro)
	}
	if _, _, err := s.Open(t.Context(), ref("missing")); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Open missing: %v", err)
	}
	if err := s.DeleteJob(t.Context(), "j_test"); err != nil {
		t.Fatal(err)
	}
	if list, _ := s.List(t.Context(), "j_test", 0); len(list) != 0 {
		t.Fatalf("after DeleteJob: %+v", list)
	}
	if list, _ := s.List(t.Context(), "j_other", 0); len(list) != 1 {
		t.Fatalf("DeleteJob took another job's objects: %+v", list)
	}
}

func TestEmptyObject(t *testing.T) { forEachBackend(t, roomy, testEmptyObject) }

func testEmptyObject(t *testing.T, s *Store, _ func() []string) {
	o := put(t, s, ref("empty"), nil)
	if o.Size != 0 || o.MD5 != hexMD5(nil) {
		t.Fatalf("%+v", o)
	}
}

// failingReader yields some bytes and then the error a cut connection gives.
type failingReader struct {
	data []byte
	err  error
}

func (f *failingReader) Read(p []byte) (int, error) {
	if len(f.data) == 0 {
		return 0, f.err
	}
	n := copy(p, f.data)
	f.data = f.data[n:]
	return n, nil
}

func TestCutBodyLeavesNothing(t *testing.T) { forEachBackend(t, roomy, testCutBodyLeavesNothing) }

func testCutBodyLeavesNothing(t *testing.T, s *Store, left func() []string) {
	put(t, s, ref("model.bin"), []byte("old and whole"))
	// 6 MiB: more than one part of a multipart upload on S3.
	_, err := s.Put(t.Context(), ref("model.bin"), &failingReader{data: bytes.Repeat([]byte("n"), 6<<20), err: io.ErrUnexpectedEOF}, 8<<20, nil)
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("Put of a cut body: %v", err)
	}
	if got, o := read(t, s, ref("model.bin")); string(got) != "old and whole" || o.SHA256 != hexSHA256(got) {
		t.Fatalf("the old object changed: %d bytes %+v", len(got), o)
	}
	_, err = s.Put(t.Context(), ref("new.bin"), &failingReader{data: []byte("half"), err: io.ErrUnexpectedEOF}, -1, nil)
	if err == nil {
		t.Fatal("Put of a cut body succeeded")
	}
	want := []string{"j_test/1/.meta/out/model.bin", "j_test/1/out/model.bin"}
	if got := left(); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("left behind: %v, want %v", got, want)
	}
}

func TestCommitRefusedLeavesNothing(t *testing.T) {
	forEachBackend(t, roomy, testCommitRefusedLeavesNothing)
}

func testCommitRefusedLeavesNothing(t *testing.T, s *Store, left func() []string) {
	put(t, s, ref("model.bin"), []byte("old"))
	stale := errors.New("attempt replaced")
	_, err := s.Put(t.Context(), ref("model.bin"), strings.NewReader("new"), 3, func() error { return stale })
	if !errors.Is(err, stale) {
		t.Fatalf("Put: %v", err)
	}
	if got, o := read(t, s, ref("model.bin")); string(got) != "old" || o.MD5 != hexMD5([]byte("old")) {
		t.Fatalf("object after a refused commit: %q %+v", got, o)
	}
	if got := left(); len(got) != 2 {
		t.Fatalf("left behind: %v", got)
	}
}

// tight holds 250 bytes in three objects of one-segment keys: their bytes
// and what their files and directories are charged.
var tight = Limits{MaxObjectBytes: 100, MaxJobBytes: 250 + 3*overhead("out/x"), MaxJobObjects: 1000}

func TestLimits(t *testing.T) { forEachBackend(t, tight, testLimits) }

func testLimits(t *testing.T, s *Store, left func() []string) {
	var tl *TooLargeError
	// Announced too large: refused before reading.
	r := &failingReader{data: []byte("x"), err: io.EOF}
	if _, err := s.Put(t.Context(), ref("a"), r, 101, nil); !errors.As(err, &tl) || tl.Of != "object" || len(r.data) != 1 {
		t.Fatalf("announced 101: %v (read %d)", err, 1-len(r.data))
	}
	// Unannounced (chunked) or understated: stopped one byte past the limit.
	for _, declared := range []int64{-1, 50} {
		if _, err := s.Put(t.Context(), ref("a"), bytes.NewReader(make([]byte, 101)), declared, nil); !errors.As(err, &tl) || tl.Limit != 100 {
			t.Fatalf("101 bytes declared as %d: %v", declared, err)
		}
	}
	put(t, s, ref("exact"), make([]byte, 100))
	put(t, s, Ref{JobID: "j_test", Attempt: 2, Bucket: "out", Key: "b"}, make([]byte, 100))
	// 200 of 250 bytes used: 51 more would pass the job's limit, announced or not.
	if _, err := s.Put(t.Context(), ref("c"), bytes.NewReader(make([]byte, 51)), 51, nil); !errors.As(err, &tl) || tl.Of != "job" {
		t.Fatalf("over the job limit, announced: %v", err)
	}
	if _, err := s.Put(t.Context(), ref("c"), bytes.NewReader(make([]byte, 51)), -1, nil); !errors.As(err, &tl) || tl.Of != "job" {
		t.Fatalf("over the job limit, chunked: %v", err)
	}
	put(t, s, ref("c"), make([]byte, 50))
	// Replacing an object counts only the difference.
	put(t, s, ref("exact"), make([]byte, 100))
	if n, objects, _ := s.JobUsage(t.Context(), "j_test"); n != tight.MaxJobBytes || objects != 3 {
		t.Fatalf("JobUsage = %d bytes, %d objects; want %d, 3", n, objects, tight.MaxJobBytes)
	}
	// Another job has its own budget.
	put(t, s, Ref{JobID: "j_else", Attempt: 1, Bucket: "out", Key: "a"}, make([]byte, 100))
	for _, f := range left() {
		if !strings.HasPrefix(f, "j_else/") && !strings.HasSuffix(f, "/exact") && !strings.HasSuffix(f, "/b") && !strings.HasSuffix(f, "/c") {
			t.Fatalf("a refused upload left %s", f)
		}
	}
}

// Parallel uploads of one job share its budget: of eight 100-byte uploads
// into a 250-byte job, exactly two succeed.
func TestJobLimitUnderConcurrency(t *testing.T) {
	forEachBackend(t, tight, testJobLimitUnderConcurrency)
}

func testJobLimitUnderConcurrency(t *testing.T, s *Store, _ func() []string) {
	var wg sync.WaitGroup
	var mu sync.Mutex
	ok := 0
	start := make(chan struct{})
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			_, err := s.Put(context.Background(), ref(string(rune('a'+i))), &slowReader{n: 100}, -1, nil)
			if err == nil {
				mu.Lock()
				ok++
				mu.Unlock()
			}
		}()
	}
	close(start)
	wg.Wait()
	if n, _, _ := s.JobUsage(t.Context(), "j_test"); ok != 2 || n != 200+2*overhead("out/x") {
		t.Fatalf("%d uploads succeeded, %d bytes charged; want 2 and %d", ok, n, 200+2*overhead("out/x"))
	}
}

// slowReader yields n bytes ten at a time, so parallel uploads interleave.
type slowReader struct{ n int }

func (r *slowReader) Read(p []byte) (int, error) {
	if r.n == 0 {
		return 0, io.EOF
	}
	k := min(10, r.n, len(p))
	r.n -= k
	return k, nil
}

func TestKeyClashes(t *testing.T) {
	t.Parallel()
	s, _ := newLocalStore(t, roomy)
	put(t, s, ref("a"), []byte("file"))
	if _, err := s.Put(t.Context(), ref("a/b"), strings.NewReader("x"), 1, nil); !errors.Is(err, ErrConflict) {
		t.Fatalf("a/b under the file a: %v", err)
	}
	put(t, s, ref("d/e"), []byte("x"))
	if _, err := s.Put(t.Context(), ref("d"), strings.NewReader("x"), 1, nil); !errors.Is(err, ErrConflict) {
		t.Fatalf("d over the directory d: %v", err)
	}
}

func TestInvalidRefs(t *testing.T) {
	t.Parallel()
	s, dir := newLocalStore(t, roomy)
	for _, r := range []Ref{
		{JobID: "j_test", Attempt: 1, Bucket: "out", Key: "../../escape"},
		{JobID: "j_test", Attempt: 1, Bucket: "..", Key: "x"},
		{JobID: "../x", Attempt: 1, Bucket: "out", Key: "x"},
		{JobID: "j_test", Attempt: 0, Bucket: "out", Key: "x"},
		{JobID: "j_test", Attempt: 1, Bucket: "out", Key: "/abs"},
	} {
		if _, err := s.Put(t.Context(), r, strings.NewReader("x"), 1, nil); !errors.Is(err, ErrInvalidName) {
			t.Errorf("Put %+v: %v", r, err)
		}
		if _, _, err := s.Open(t.Context(), r); !errors.Is(err, ErrInvalidName) {
			t.Errorf("Open %+v: %v", r, err)
		}
	}
	if f := files(t, dir); len(f) != 0 {
		t.Fatalf("files: %v", f)
	}
}

// A symbolic link anywhere in the tree is refused, never followed, whether
// it points out of the artifacts directory or into another job.
func TestSymlinksRefused(t *testing.T) {
	t.Parallel()
	s, dir := newLocalStore(t, roomy)
	outside := t.TempDir()
	if err := os.WriteFile(filepath.Join(outside, "secret"), []byte("secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	put(t, s, ref("seed"), []byte("x"))
	put(t, s, Ref{JobID: "j_victim", Attempt: 1, Bucket: "out", Key: "weights"}, []byte("victim"))
	links := map[string]string{
		"j_test/1/out/dirlink":       outside,                              // a directory link out of the tree
		"j_test/1/out/filelink":      filepath.Join(outside, "secret"),     // a file link out of the tree
		"j_test/1/out/relative":      "../../../../" + filepath.Base(dir),  // relative, pointing back up
		"j_test/1/out/victim":        filepath.Join(dir, "j_victim/1/out"), // into another job
		"j_test/1/out/victimweights": filepath.Join(dir, "j_victim/1/out/weights"),
	}
	for name, target := range links {
		if err := os.Symlink(target, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(outside, filepath.Join(dir, "j_linked")); err != nil { // a whole job directory
		t.Fatal(err)
	}
	for _, key := range []string{"dirlink/x", "relative/x", "victim/weights", "victim/new"} {
		if _, err := s.Put(t.Context(), ref(key), strings.NewReader("evil"), 4, nil); !errors.Is(err, ErrUnsafePath) {
			t.Errorf("Put through %s: %v", key, err)
		}
		if _, _, err := s.Open(t.Context(), ref(key)); !errors.Is(err, ErrUnsafePath) {
			t.Errorf("Open through %s: %v", key, err)
		}
	}
	for _, key := range []string{"filelink", "victimweights"} {
		if _, _, err := s.Open(t.Context(), ref(key)); !errors.Is(err, ErrUnsafePath) {
			t.Errorf("Open of the link %s: %v", key, err)
		}
	}
	// Nor is a link replaced by an upload: whoever planted it should see it.
	if _, err := s.Put(t.Context(), ref("filelink"), strings.NewReader("mine"), 4, nil); !errors.Is(err, ErrUnsafePath) {
		t.Errorf("Put over a link: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(outside, "secret")); string(b) != "secret" {
		t.Fatalf("the link's target changed: %q", b)
	}
	linked := Ref{JobID: "j_linked", Attempt: 1, Bucket: "out", Key: "x"}
	if _, err := s.Put(t.Context(), linked, strings.NewReader("evil"), 4, nil); !errors.Is(err, ErrUnsafePath) {
		t.Errorf("Put into a linked job directory: %v", err)
	}
	if got, _ := read(t, s, Ref{JobID: "j_victim", Attempt: 1, Bucket: "out", Key: "weights"}); string(got) != "victim" {
		t.Fatalf("victim changed: %q", got)
	}
	if f := files(t, outside); len(f) != 1 {
		t.Fatalf("files written outside: %v", f)
	}
	// Listing skips links instead of following them.
	list, err := s.List(t.Context(), "j_test", 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range list {
		if o.Path != "out/seed" {
			t.Errorf("listed %s", o.Path)
		}
	}
}

func TestSweepsStaleTemporaryFiles(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "a")
	b, err := NewLocal(dir)
	if err != nil {
		t.Fatal(err)
	}
	b.Close()
	old, fresh := filepath.Join(dir, ".tmp", "upload-old"), filepath.Join(dir, ".tmp", "upload-fresh")
	for _, p := range []string{old, fresh} {
		if err := os.WriteFile(p, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	long := staleTemp * 2
	if err := os.Chtimes(old, timeAgo(long), timeAgo(long)); err != nil {
		t.Fatal(err)
	}
	b, err = NewLocal(dir)
	if err != nil {
		t.Fatal(err)
	}
	b.Close()
	if _, err := os.Stat(old); !os.IsNotExist(err) {
		t.Fatalf("stale temporary file kept: %v", err)
	}
	if _, err := os.Stat(fresh); err != nil {
		t.Fatalf("fresh temporary file removed: %v", err)
	}
}

// dirs counts the directories below dir, the root included.
func dirs(t *testing.T, dir string) int {
	t.Helper()
	n := 0
	_ = filepath.WalkDir(dir, func(_ string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			n++
		}
		return nil
	})
	return n
}

// Empty objects under deep keys cost their job's quota what their files and
// directories cost the disk: a job cannot fill a disk's inodes with them.
// Keys deeper than MaxKeyDepth are refused, and a job holds at most
// MaxJobObjects objects. A refused upload leaves no directory behind.
func TestQuotaChargesFilesAndDirectories(t *testing.T) {
	t.Parallel()
	lim := Limits{MaxObjectBytes: 1 << 20, MaxJobBytes: 2 << 20, MaxJobObjects: 1000}
	s, dir := newLocalStore(t, lim)
	deep := func(i int) Ref {
		segs := make([]string, MaxKeyDepth)
		for j := range segs {
			segs[j] = "d"
		}
		segs[0] = string(rune('a'+i%26)) + strings.Repeat("x", i/26)
		return ref(strings.Join(segs, "/"))
	}
	var tl *TooLargeError
	stored := 0
	for i := range 400 {
		_, err := s.Put(t.Context(), deep(i), bytes.NewReader(nil), 0, nil)
		if err == nil {
			stored++
			continue
		}
		if !errors.As(err, &tl) || tl.Of != "job" {
			t.Fatalf("upload %d: %v", i, err)
		}
	}
	per := Charge(deep(0).Path(), 0)
	if want := int(lim.MaxJobBytes / per); stored != want {
		t.Errorf("%d empty deep objects stored in a 2 MiB quota; want %d (each charged %d bytes)", stored, want, per)
	}
	// The disk holds no more directories than the quota paid for.
	if n, paid := dirs(t, dir), int(lim.MaxJobBytes/EntryCost); n > paid {
		t.Errorf("%d directories on disk for a quota of %d entries", n, paid)
	}
	before := dirs(t, dir)
	if _, err := s.Put(t.Context(), deep(400), bytes.NewReader(nil), 0, nil); !errors.As(err, &tl) {
		t.Fatalf("an upload over the quota: %v", err)
	}
	if after := dirs(t, dir); after != before {
		t.Errorf("a refused upload left %d directories", after-before)
	}
	t.Logf("400 empty %d-segment uploads into a 2 MiB quota: %d stored, %d directories on disk", MaxKeyDepth, stored, before)

	tooDeep := ref(strings.Repeat("d/", MaxKeyDepth) + "x")
	if _, err := s.Put(t.Context(), tooDeep, bytes.NewReader(nil), 0, nil); !errors.Is(err, ErrInvalidName) ||
		!strings.Contains(err.Error(), "has 17 segments; at most 16") {
		t.Errorf("a key of %d segments: %v", MaxKeyDepth+1, err)
	}
}

func TestObjectCountLimit(t *testing.T) {
	t.Parallel()
	s, _ := newLocalStore(t, Limits{MaxObjectBytes: 1 << 20, MaxJobBytes: 1 << 30, MaxJobObjects: 3})
	for _, k := range []string{"a", "b", "c"} {
		put(t, s, ref(k), []byte("x"))
	}
	var tl *TooLargeError
	if _, err := s.Put(t.Context(), ref("d"), bytes.NewReader(nil), 0, nil); !errors.As(err, &tl) || tl.Of != "objects" ||
		!strings.Contains(err.Error(), "max_job_objects (3)") {
		t.Fatalf("a fourth object: %v", err)
	}
	put(t, s, ref("b"), []byte("replaced")) // replacing one adds none
	if _, n, _ := s.JobUsage(t.Context(), "j_test"); n != 3 {
		t.Fatalf("%d objects", n)
	}
}
