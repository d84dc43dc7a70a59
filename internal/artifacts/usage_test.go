package artifacts

import (
	"bytes"
	"testing"
)

func TestTotalBytes(t *testing.T) { forEachBackend(t, roomy, testTotalBytes) }

func testTotalBytes(t *testing.T, s *Store, _ func() []string) {
	if n, err := s.TotalBytes(t.Context()); err != nil || n != 0 {
		t.Fatalf("empty store: %d, %v", n, err)
	}
	put(t, s, Ref{JobID: "j_one", Attempt: 1, Bucket: "out", Key: "a.bin"}, bytes.Repeat([]byte("a"), 100))
	put(t, s, Ref{JobID: "j_one", Attempt: 2, Bucket: "out", Key: "dir/b.bin"}, bytes.Repeat([]byte("b"), 30))
	put(t, s, Ref{JobID: "j_two", Attempt: 1, Bucket: "ckpt", Key: "c"}, bytes.Repeat([]byte("c"), 7))
	n, err := s.TotalBytes(t.Context())
	if err != nil || n != 137 {
		t.Fatalf("TotalBytes = %d, %v; want 137 (metadata records not counted)", n, err)
	}
	if err := s.DeleteJob(t.Context(), "j_one"); err != nil {
		t.Fatal(err)
	}
	if n, err := s.TotalBytes(t.Context()); err != nil || n != 7 {
		t.Fatalf("after DeleteJob: %d, %v", n, err)
	}
}
