package artifacts

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// smallFS mounts a tmpfs of the given size and inode count for the test:
// a real filesystem that fills in milliseconds.
func smallFS(t *testing.T, size string, inodes int) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("mounting a small tmpfs needs root (the CI runs the tests as root)")
	}
	dir := t.TempDir()
	opts := fmt.Sprintf("size=%s,nr_inodes=%d,mode=0700", size, inodes)
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, opts); err != nil {
		t.Skipf("cannot mount a tmpfs here (%v): the reserve is tested on a real filesystem only", err)
	}
	t.Cleanup(func() { _ = syscall.Unmount(dir, syscall.MNT_DETACH) })
	return dir
}

func storeOn(t *testing.T, dir string, l Limits) (*Store, *Local) {
	t.Helper()
	b, err := NewLocal(filepath.Join(dir, "artifacts"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return New(b, l), b
}

var unlimited = Limits{MaxObjectBytes: 1 << 40, MaxJobBytes: 1 << 40, MaxJobObjects: 1 << 30}

// One job storing many small files stops at the reserve of inodes, with an
// error that names it; the filesystem keeps that share free for the others.
// Without a reserve the same job takes every inode there is.
func TestReserveKeepsInodesFree(t *testing.T) {
	dir := smallFS(t, "64m", 400)
	lim := unlimited
	lim.ReservePercent = 25
	s, b := storeOn(t, dir, lim)
	hog := func(s *Store, job string) (int, error) {
		for i := 0; ; i++ {
			r := Ref{JobID: job, Attempt: 1, Bucket: "out", Key: fmt.Sprintf("f%d", i)}
			if _, err := s.Put(t.Context(), r, bytes.NewReader([]byte("x")), 1, nil); err != nil {
				return i, err
			}
		}
	}
	stored, err := hog(s, "j_hog")
	var re *ReserveError
	if !errors.As(err, &re) || re.Resource != "inodes" {
		t.Fatalf("after %d objects: %v; want a ReserveError on inodes", stored, err)
	}
	if !strings.Contains(err.Error(), "artifacts.reserve_percent = 25 %") {
		t.Errorf("the refusal does not name the reserve: %v", err)
	}
	sp, err := b.Space()
	if err != nil {
		t.Fatal(err)
	}
	if want := reserved(25, sp.TotalInodes); sp.FreeInodes < want {
		t.Errorf("%d of %d inodes free after the hog; the reserve is %d", sp.FreeInodes, sp.TotalInodes, want)
	}
	if left := files(t, filepath.Join(dir, "artifacts", tmpName)); len(left) != 0 {
		t.Errorf("refused uploads left temporary files: %v", left)
	}
	t.Logf("reserve 25 %%: the hog stored %d objects; %d of %d inodes free", stored, sp.FreeInodes, sp.TotalInodes)

	// Without a reserve the disk itself runs out.
	s.SetLimits(unlimited)
	more, err := hog(s, "j_hog2")
	if errors.As(err, &re) || !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("with no reserve, after %d more objects: %v; want ENOSPC", more, err)
	}
}

// An upload that announces more than fits beside the reserve is refused
// before a byte is read; one of unknown length is stopped while it streams.
// Either leaves nothing behind, and uploads in progress count what they
// announced, so two cannot both take the same free space.
func TestReserveKeepsBytesFree(t *testing.T) {
	dir := smallFS(t, "32m", 1000)
	lim := unlimited
	lim.ReservePercent = 50
	s, b := storeOn(t, dir, lim)
	var re *ReserveError

	big := bytes.Repeat([]byte("b"), 20<<20) // more than half of 32 MiB
	body := &countingReader{r: bytes.NewReader(big)}
	_, err := s.Put(t.Context(), ref("big.bin"), body, int64(len(big)), nil)
	if !errors.As(err, &re) || re.Resource != "bytes" {
		t.Fatalf("an announced 20 MiB upload into a 32 MiB disk with 50 %% reserved: %v", err)
	}
	if body.n != 0 {
		t.Errorf("%d bytes read of an upload refused by its announced length", body.n)
	}

	_, err = s.Put(t.Context(), ref("chunked.bin"), bytes.NewReader(big), -1, nil)
	if !errors.As(err, &re) || re.Resource != "bytes" {
		t.Fatalf("a 20 MiB upload of unknown length: %v", err)
	}
	if left := files(t, filepath.Join(dir, "artifacts")); len(left) != 0 {
		t.Errorf("refused uploads left files: %v", left)
	}
	sp, _ := b.Space()
	if want := reserved(50, sp.TotalBytes); sp.FreeBytes < want {
		t.Errorf("%d bytes free, reserve %d", sp.FreeBytes, want)
	}

	// Another upload's announced bytes are taken already.
	claim, err := s.claimSpace(50, "out/other", 10<<20)
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.Put(t.Context(), ref("ten.bin"), bytes.NewReader(big[:10<<20]), 10<<20, nil)
	if !errors.As(err, &re) {
		t.Errorf("10 MiB beside another upload's 10 MiB in 16 MiB of room: %v", err)
	}
	claim.done()
	put(t, s, ref("ten.bin"), big[:10<<20])
}

type countingReader struct {
	r interface{ Read([]byte) (int, error) }
	n int
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += n
	return n, err
}
