package jobfs

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// jobIdent is a uid that is nobody's on the test machine.
var jobIdent = Ident{UID: 1879113000, GID: 1879113000, Switch: true}

func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("acting as another uid needs root (CAP_SETUID)")
	}
}

// reachable lets other uids pass through dir and its parents, as the
// packaged state directory does.
func reachable(t *testing.T, dir string) string {
	t.Helper()
	for d := dir; d != "/" && d != "."; d = filepath.Dir(d) {
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

func write(t *testing.T, path, body string, uid int) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Lchown(path, uid, uid); err != nil {
		t.Fatal(err)
	}
}

// A job's tree as workerd finds it after the job ended: the job directory
// is workerd's again (0700), everything below it the job's (0700/0600).
func jobTree(t *testing.T) (jobDir string) {
	t.Helper()
	jobDir = filepath.Join(t.TempDir(), "j_1")
	out := filepath.Join(jobDir, "out")
	write(t, filepath.Join(out, "checkpoint-10", "model.bin"), "weights", jobIdent.UID)
	write(t, filepath.Join(out, "checkpoint-10", "sub", "state.json"), "{}", jobIdent.UID)
	for _, d := range []string{filepath.Join(out, "checkpoint-10", "sub"), filepath.Join(out, "checkpoint-10"), out} {
		if err := os.Lchown(d, jobIdent.UID, jobIdent.GID); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(jobDir, 0o700); err != nil {
		t.Fatal(err)
	}
	return jobDir
}

func TestReadsAsTheJob(t *testing.T) {
	needRoot(t)
	t.Parallel()
	jobDir := jobTree(t)
	// A file of workerd's own that the job cannot read, planted in the tree.
	write(t, filepath.Join(jobDir, "out", "checkpoint-10", "secret"), "root only", 0)

	d, err := Open(jobDir, "out", jobIdent)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	ents, err := d.ReadDir("")
	if err != nil || len(ents) != 1 || ents[0].Name != "checkpoint-10" || !ents[0].Type.IsDir() {
		t.Fatalf("ReadDir: %v %v", ents, err)
	}
	files, err := d.Walk("checkpoint-10", nil)
	if err != nil {
		t.Fatal(err)
	}
	var paths []string
	for _, f := range files {
		paths = append(paths, f.Path)
	}
	if !slices.Equal(paths, []string{"model.bin", "secret", "sub/state.json"}) {
		t.Fatalf("walk: %v", paths)
	}
	f, err := d.OpenFile("checkpoint-10/model.bin")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(f)
	f.Close()
	if string(b) != "weights" {
		t.Fatalf("read %q", b)
	}
	if _, err := d.OpenFile("checkpoint-10/secret"); !errors.Is(err, fs.ErrPermission) {
		t.Fatalf("a file the job cannot read was opened: %v", err)
	}
	files, err = d.Walk("", func(p string, e Entry) bool { return p != "checkpoint-10/sub" })
	if err != nil || len(files) != 2 || files[1].Path != "checkpoint-10/secret" {
		t.Fatalf("walk leaving sub out: %v %v", files, err)
	}
	if !d.Exists("checkpoint-10/sub") || d.Exists("checkpoint-10/nothing") {
		t.Error("Exists")
	}
}

func TestWalkRefusesLinksAndSpecialFiles(t *testing.T) {
	t.Parallel()
	for name, plant := range map[string]func(dir string) error{
		"symlink out": func(dir string) error { return os.Symlink("/etc", filepath.Join(dir, "etc")) },
		"symlink in":  func(dir string) error { return os.Symlink("model.bin", filepath.Join(dir, "alias")) },
		"fifo":        func(dir string) error { return mkfifo(filepath.Join(dir, "pipe")) },
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			ck := filepath.Join(dir, "checkpoint-1")
			if err := os.MkdirAll(ck, 0o755); err != nil {
				t.Fatal(err)
			}
			os.WriteFile(filepath.Join(ck, "model.bin"), []byte("x"), 0o644)
			if err := plant(ck); err != nil {
				t.Fatal(err)
			}
			d, err := Open(dir, "", Ident{})
			if err != nil {
				t.Fatal(err)
			}
			defer d.Close()
			_, err = d.Walk("checkpoint-1", nil)
			var ue *UnsafeError
			if !errors.As(err, &ue) {
				t.Fatalf("walk accepted it: %v", err)
			}
			t.Log(ue)
		})
	}
}

func TestOpenRefusesALinkedDirectory(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := os.Symlink("/etc", filepath.Join(dir, "out")); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(dir, "out", Ident{}); err == nil {
		t.Fatal("opened a symbolic link as the output directory")
	}
	if _, err := Open(dir, "missing", Ident{}); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("missing: %v", err)
	}
	if _, err := Open(dir, "../x", Ident{}); err == nil {
		t.Fatal("opened a path out of the job's directory")
	}
}

func TestWritesBelongToTheJob(t *testing.T) {
	needRoot(t)
	t.Parallel()
	jobDir := filepath.Join(reachable(t, t.TempDir()), "j_2")
	if err := os.Mkdir(jobDir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Lchown(jobDir, jobIdent.UID, jobIdent.GID); err != nil {
		t.Fatal(err)
	}
	if err := MkdirAll(jobDir, "a/b", jobIdent); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(filepath.Join(jobDir, "a", "b"))
	if err != nil || ownerOf(st) != jobIdent.UID {
		t.Fatalf("made %v owned by %d", err, ownerOf(st))
	}
	// Workerd's staging tree, given to the job and moved in as the job.
	staging := filepath.Join(reachable(t, t.TempDir()), "stage")
	write(t, filepath.Join(staging, "checkpoint-5", "x", "y"), "data", 0)
	if err := Chown(staging, jobIdent); err != nil {
		t.Fatal(err)
	}
	ab, err := Open(jobDir, "a/b", jobIdent)
	if err != nil {
		t.Fatal(err)
	}
	defer ab.Close()
	if err := ab.MoveIn(staging, "checkpoint-5"); err != nil {
		t.Fatal(err)
	}
	st, err = os.Stat(filepath.Join(jobDir, "a", "b", "checkpoint-5", "x", "y"))
	if err != nil || ownerOf(st) != jobIdent.UID {
		t.Fatalf("moved %v owned by %d", err, ownerOf(st))
	}
	// Removing below a held directory removes a link, never what it points
	// at.
	elsewhere := filepath.Join(reachable(t, t.TempDir()), "elsewhere")
	write(t, filepath.Join(elsewhere, "keep"), "x", jobIdent.UID)
	os.Lchown(elsewhere, jobIdent.UID, jobIdent.GID)
	if err := os.Symlink(elsewhere, filepath.Join(jobDir, "a", "b", "checkpoint-5", "link")); err != nil {
		t.Fatal(err)
	}
	if err := ab.RemoveAll("checkpoint-5"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(elsewhere, "keep")); err != nil || ab.Exists("checkpoint-5") {
		t.Fatalf("RemoveAll followed a link (%v) or left the directory", err)
	}
	if err := RemoveAll(filepath.Join(jobDir, "a"), jobIdent); err != nil {
		t.Fatal(err)
	}
	// The job cannot remove workerd's files.
	write(t, filepath.Join(jobDir, "root-owned", "f"), "x", 0)
	if err := RemoveAll(filepath.Join(jobDir, "root-owned"), jobIdent); err == nil {
		t.Fatal("removed workerd's files as the job")
	}
	top, err := Open(jobDir, "", jobIdent)
	if err != nil {
		t.Fatal(err)
	}
	defer top.Close()
	if err := top.RemoveAll("root-owned"); err == nil {
		t.Fatal("removed workerd's files as the job below a held directory")
	}
}

// No symbolic link is followed on the way to what a Dir reaches, whether
// the kernel resolves the path (openat2) or the package goes one component
// at a time.
func TestNoLinkOnTheWay(t *testing.T) {
	for _, byComponent := range []bool{false, true} {
		t.Run(map[bool]string{false: "openat2", true: "by component"}[byComponent], func(t *testing.T) {
			if byComponent {
				noOpenat2.Store(true)
				defer noOpenat2.Store(false)
			}
			dir := t.TempDir()
			outside := filepath.Join(t.TempDir(), "outside")
			write(t, filepath.Join(outside, "state.json"), "secret", os.Getuid())
			write(t, filepath.Join(dir, "checkpoint-1", "real", "state.json"), "mine", os.Getuid())
			if err := os.Symlink(outside, filepath.Join(dir, "checkpoint-1", "sub")); err != nil {
				t.Fatal(err)
			}
			d, err := Open(dir, "", Ident{})
			if err != nil {
				t.Fatal(err)
			}
			defer d.Close()
			if f, err := d.OpenFile("checkpoint-1/real/state.json"); err != nil {
				t.Fatalf("a path without links: %v", err)
			} else {
				f.Close()
			}
			if f, err := d.OpenFile("checkpoint-1/sub/state.json"); err == nil {
				f.Close()
				t.Fatal("opened a file through a linked directory")
			}
			if _, err := d.ReadDir("checkpoint-1/sub"); err == nil {
				t.Fatal("listed a linked directory")
			}
			if d.Exists("checkpoint-1/sub/state.json") {
				t.Fatal("looked through a linked directory")
			}
			if !d.Exists("checkpoint-1/sub") {
				t.Fatal("the link itself is there")
			}
			for _, bad := range []string{"../x", "checkpoint-1/../../x", "/etc/passwd"} {
				if f, err := d.OpenFile(bad); err == nil {
					f.Close()
					t.Fatalf("opened %s", bad)
				}
			}
		})
	}
}

// A named pipe where a file was is refused at once: opening it does not
// wait for a writer that never comes.
func TestOpenFileRefusesAPipeAtOnce(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := mkfifo(filepath.Join(dir, "model.bin")); err != nil {
		t.Fatal(err)
	}
	d, err := Open(dir, "", Ident{})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	done := make(chan error, 1)
	go func() {
		f, err := d.OpenFile("model.bin")
		if err == nil {
			f.Close()
		}
		done <- err
	}()
	select {
	case err := <-done:
		var ue *UnsafeError
		if !errors.As(err, &ue) {
			t.Fatalf("a named pipe: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("opening a named pipe waited for a writer")
	}
}
