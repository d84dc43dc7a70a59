package keeper

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/checkpoint"
	"github.com/simpletuner/simpletuner-orchestration/internal/checkpoint/jobfs"
	"golang.org/x/sys/unix"
)

// A job that swaps a directory of its checkpoint for a link to a directory
// outside (renameat2 RENAME_EXCHANGE, over and over) while the checkpoint
// is uploaded never gets a file from outside into its artifacts: what is
// walked is opened below the output directory with no link followed.
func TestSwappedDirectoryDuringUpload(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("acting as another uid needs root")
	}
	t.Parallel()
	id := jobfs.Ident{UID: 1879113002, GID: 1879113002, Switch: true}
	o := startOrch(t)
	jobID := o.submit(`{"output_dir": "out"}`)
	work := t.TempDir()
	passable(t, work)
	j := jobFor(t, o.dispatch(jobID), work, nil)
	out := filepath.Join(j.Dir, "out")
	// Outside the job's directory: readable by anyone, so only where the
	// path leads decides whether it is uploaded.
	outside := filepath.Join(passable(t, t.TempDir()), "outside")
	if err := os.MkdirAll(outside, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(outside, "state.json"), []byte("SECRET outside the job"), 0o644); err != nil {
		t.Fatal(err)
	}
	k := o.keeper(work)
	c := k.client(j)
	if err := os.MkdirAll(out, 0o755); err != nil {
		t.Fatal(err)
	}
	chownTree(t, j.Dir, id)
	root, err := jobfs.Open(j.Dir, "out", id)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()

	deadline := time.Now().Add(20 * time.Second)
	kept, refused := 0, 0
	for i := 1; i <= 64 && time.Now().Before(deadline); i++ {
		name := "checkpoint-" + strconv.Itoa(i)
		writeCheckpoint(t, out, name, map[string]string{"model.bin": "weights", "sub/state.json": "the job's own"}, true)
		// The link waits beside the checkpoint, not in it: a walk that
		// met it would refuse the checkpoint outright.
		link := "link-" + name
		if err := os.Symlink(outside, filepath.Join(out, link)); err != nil {
			t.Fatal(err)
		}
		chownTree(t, out, id)
		stop := swapping(t, out, name+"/sub", link)
		_, err := k.uploadCheckpoint(t.Context(), c, j, root, checkpoint.Dir{Name: name, Step: int64(i)})
		stop()
		var nk *notKept
		switch {
		case err == nil:
			kept++
		case errors.As(err, &nk):
			refused++
		default:
			t.Logf("%s: %v", name, err)
		}
		if err != nil && i <= 3 {
			t.Logf("%s: %v", name, err)
		}
		if leaked := o.storedHolding(jobID, "SECRET"); len(leaked) > 0 {
			t.Fatalf("a file from outside the job's directory was uploaded as %v (after %d checkpoints)", leaked, i)
		}
	}
	t.Logf("%d checkpoints kept, %d refused while a directory was swapped", kept, refused)
}

// passable lets other uids pass through dir and its parents.
func passable(t *testing.T, dir string) string {
	t.Helper()
	for d := dir; d != "/"; d = filepath.Dir(d) {
		st, err := os.Stat(d)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(d, st.Mode().Perm()|0o011); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func chownTree(t *testing.T, dir string, id jobfs.Ident) {
	t.Helper()
	err := filepath.WalkDir(dir, func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, id.UID, id.GID)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// swapping exchanges a and b below dir over and over until the returned stop
// is called.
func swapping(t *testing.T, dir, a, b string) (stop func()) {
	t.Helper()
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-done:
				return
			default:
			}
			if err := unix.Renameat2(fd, a, fd, b, unix.RENAME_EXCHANGE); err != nil {
				t.Errorf("renameat2: %v", err)
				return
			}
		}
	}()
	return func() {
		close(done)
		wg.Wait()
		unix.Close(fd)
	}
}

// storedHolding lists the job's stored objects whose contents hold s.
func (o *orch) storedHolding(jobID, s string) []string {
	var out []string
	for _, rel := range o.stored(jobID) {
		b, err := os.ReadFile(filepath.Join(o.arts, jobID, rel))
		if err == nil && strings.Contains(string(b), s) {
			out = append(out, rel)
		}
	}
	return out
}
