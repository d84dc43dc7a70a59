package artifacts

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Local keeps objects as files below one directory. Every path is walked one
// component at a time from an open descriptor of that directory with
// O_NOFOLLOW, so a symbolic link planted anywhere below it (by a job on a
// shared filesystem, or by mistake) is refused instead of followed, whatever
// it points to. Uploads go to a temporary file in <dir>/.tmp, are fsynced and
// then renamed into place, so a cut connection or a crash never leaves half
// an object under its real name.
type Local struct {
	dir  string
	root *os.File // the directory itself, for *at calls
	tmp  string   // <dir>/.tmp: same filesystem as every object, so rename is atomic
}

const (
	dirPerm  = 0o750
	filePerm = 0o640
	tmpName  = ".tmp"
	// staleTemp is the age after which a temporary file left by a crash is
	// swept at start-up; an upload in progress touches its file far more often.
	staleTemp = time.Hour
)

// copyBuffers are the buffers uploads are copied through: a fixed amount of
// memory per upload, whatever its size.
var copyBuffers = sync.Pool{New: func() any { b := make([]byte, 256<<10); return &b }}

// NewLocal opens (creating it if needed) the directory dir and sweeps
// temporary files that a crashed orchestrator left behind.
func NewLocal(dir string) (*Local, error) {
	if !filepath.IsAbs(dir) {
		return nil, fmt.Errorf("artifacts directory %q must be an absolute path", dir)
	}
	tmp := filepath.Join(dir, tmpName)
	if err := os.MkdirAll(tmp, dirPerm); err != nil {
		return nil, fmt.Errorf("artifacts directory: %w", err)
	}
	root, err := os.Open(dir)
	if err != nil {
		return nil, fmt.Errorf("artifacts directory: %w", err)
	}
	l := &Local{dir: dir, root: root, tmp: tmp}
	l.sweepTemp(time.Now().Add(-staleTemp))
	return l, nil
}

func (l *Local) String() string { return "local " + l.dir }

// Close releases the directory descriptor.
func (l *Local) Close() error { return l.root.Close() }

func (l *Local) sweepTemp(before time.Time) {
	entries, err := os.ReadDir(l.tmp)
	if err != nil {
		return
	}
	for _, e := range entries {
		if info, err := e.Info(); err == nil && info.ModTime().Before(before) {
			_ = os.Remove(filepath.Join(l.tmp, e.Name()))
		}
	}
}

// openDir opens the directory segs below the root without following links,
// creating missing directories when create is set. The caller closes the fd.
func (l *Local) openDir(segs []string, create bool) (int, error) {
	fd, err := unix.Openat(int(l.root.Fd()), ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	for _, seg := range segs {
		next, err := unix.Openat(fd, seg, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if errors.Is(err, unix.ENOENT) && create {
			if err = unix.Mkdirat(fd, seg, dirPerm); err == nil || errors.Is(err, unix.EEXIST) {
				next, err = unix.Openat(fd, seg, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			}
		}
		if err != nil {
			err = classify(fd, seg, err)
		}
		unix.Close(fd)
		if err != nil {
			return -1, err
		}
		fd = next
	}
	return fd, nil
}

// classify names what went wrong opening seg in the directory dfd. Opening a
// link with O_NOFOLLOW fails with ELOOP, or with ENOTDIR when a directory was
// asked for, so a failure is checked against what is really there.
func classify(dfd int, seg string, err error) error {
	if errors.Is(err, unix.ENOENT) {
		return ErrNotFound
	}
	if st, serr := statAt(dfd, seg); serr == nil {
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFLNK:
			return fmt.Errorf("%w: %q is a symbolic link", ErrUnsafePath, seg)
		case unix.S_IFREG:
			if errors.Is(err, unix.ENOTDIR) {
				return fmt.Errorf("%w: %q is an object, not a directory", ErrConflict, seg)
			}
		case unix.S_IFDIR:
		default:
			return fmt.Errorf("%w: %q is not a regular file", ErrUnsafePath, seg)
		}
	}
	return fmt.Errorf("artifacts: %s: %w", seg, err)
}

func split(name string) (dirs []string, leaf string) {
	segs := strings.Split(name, "/")
	return segs[:len(segs)-1], segs[len(segs)-1]
}

// statAt describes dir/leaf without following a link.
func statAt(dfd int, leaf string) (unix.Stat_t, error) {
	var st unix.Stat_t
	err := unix.Fstatat(dfd, leaf, &st, unix.AT_SYMLINK_NOFOLLOW)
	return st, err
}

func entryOf(name string, st *unix.Stat_t) Entry {
	return Entry{Name: name, Size: st.Size, Modified: time.Unix(st.Mtim.Unix()).UTC()}
}

// Put implements Backend. The object's directories are made only once its
// bytes are in and committed: an upload that is refused or cut off leaves
// no directory behind (a tree of empty ones would cost inodes no quota saw).
func (l *Local) Put(ctx context.Context, name string, body io.Reader, commit func() error) error {
	dirs, leaf := split(name)
	// Refuse before reading a byte what could never be renamed into place.
	if err := l.checkPlace(dirs, leaf); err != nil {
		return err
	}
	tmpFD, err := l.openDir([]string{tmpName}, true)
	if err != nil {
		return err
	}
	defer unix.Close(tmpFD)
	tmp := "upload-" + rand.Text()
	fd, err := unix.Openat(tmpFD, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, filePerm)
	if err != nil {
		return fmt.Errorf("artifacts: temporary file: %w", err)
	}
	f := os.NewFile(uintptr(fd), tmp)
	renamed := false
	defer func() {
		f.Close()
		if !renamed {
			_ = unix.Unlinkat(tmpFD, tmp, 0)
		}
	}()
	buf := copyBuffers.Get().(*[]byte)
	_, err = io.CopyBuffer(onlyWriter{f}, body, *buf)
	copyBuffers.Put(buf)
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	// The bytes must be on disk before the name points at them, or a power
	// cut could leave a full-size file of zeros under the real name.
	if err := f.Sync(); err != nil {
		return fmt.Errorf("artifacts: fsync: %w", err)
	}
	if commit != nil {
		if err := commit(); err != nil {
			return err
		}
	}
	dfd, err := l.openDir(dirs, true)
	if err != nil {
		return err
	}
	defer unix.Close(dfd)
	if err := unix.Renameat(tmpFD, tmp, dfd, leaf); err != nil {
		if errors.Is(err, unix.EISDIR) || errors.Is(err, unix.ENOTEMPTY) || errors.Is(err, unix.EEXIST) {
			return fmt.Errorf("%w: %q is a directory of other objects", ErrConflict, leaf)
		}
		return fmt.Errorf("artifacts: rename into place: %w", err)
	}
	renamed = true
	// And the directory entry must be on disk before we answer "stored".
	if err := unix.Fsync(dfd); err != nil {
		return fmt.Errorf("artifacts: fsync directory: %w", err)
	}
	return nil
}

// checkPlace refuses a name whose place holds something an object cannot
// replace: a directory, a link, a special file, or such a thing on the way.
func (l *Local) checkPlace(dirs []string, leaf string) error {
	dfd, err := l.openDir(dirs, false)
	if errors.Is(err, ErrNotFound) {
		return nil // made at commit
	}
	if err != nil {
		return err
	}
	defer unix.Close(dfd)
	if st, err := statAt(dfd, leaf); err == nil {
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFREG:
		case unix.S_IFDIR:
			return fmt.Errorf("%w: %q is a directory of other objects", ErrConflict, leaf)
		default:
			return fmt.Errorf("%w: %q is not a regular file", ErrUnsafePath, leaf)
		}
	}
	return nil
}

// onlyWriter hides *os.File's ReadFrom, so io.CopyBuffer uses our bounded
// buffer (ReadFrom may pick its own strategies for unknown readers).
type onlyWriter struct{ w io.Writer }

func (o onlyWriter) Write(p []byte) (int, error) { return o.w.Write(p) }

// Open implements Backend.
func (l *Local) Open(ctx context.Context, name string) (Reader, Entry, error) {
	dirs, leaf := split(name)
	dfd, err := l.openDir(dirs, false)
	if err != nil {
		return nil, Entry{}, err
	}
	defer unix.Close(dfd)
	fd, err := unix.Openat(dfd, leaf, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, Entry{}, classify(dfd, leaf, err)
	}
	f := os.NewFile(uintptr(fd), name)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		f.Close()
		return nil, Entry{}, err
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
	case unix.S_IFDIR:
		f.Close()
		return nil, Entry{}, ErrNotFound
	default:
		f.Close()
		return nil, Entry{}, fmt.Errorf("%w: %q is not a regular file", ErrUnsafePath, leaf)
	}
	return f, entryOf(name, &st), nil
}

// Stat implements Backend.
func (l *Local) Stat(ctx context.Context, name string) (Entry, error) {
	dirs, leaf := split(name)
	dfd, err := l.openDir(dirs, false)
	if err != nil {
		return Entry{}, err
	}
	defer unix.Close(dfd)
	st, err := statAt(dfd, leaf)
	if err != nil {
		return Entry{}, classify(dfd, leaf, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return Entry{}, ErrNotFound
	}
	return entryOf(name, &st), nil
}

// List implements Backend. Links and special files are skipped, not followed.
func (l *Local) List(ctx context.Context, prefix string) ([]Entry, error) {
	var dirs []string // "" lists everything, the temporary files included
	if prefix != "" {
		dirs = strings.Split(strings.TrimSuffix(prefix, "/"), "/")
	}
	dfd, err := l.openDir(dirs, false)
	if errors.Is(err, ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []Entry
	err = l.walk(ctx, dfd, prefix, &out)
	return out, err
}

// walk lists the directory dfd (named prefix) recursively and closes dfd.
func (l *Local) walk(ctx context.Context, dfd int, prefix string, out *[]Entry) error {
	d := os.NewFile(uintptr(dfd), prefix)
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return err
	}
	for _, n := range names {
		if err := ctx.Err(); err != nil {
			return err
		}
		st, err := statAt(dfd, n)
		if err != nil {
			continue // removed meanwhile
		}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFREG:
			*out = append(*out, entryOf(prefix+n, &st))
		case unix.S_IFDIR:
			sub, err := unix.Openat(dfd, n, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			if err != nil {
				continue
			}
			if err := l.walk(ctx, sub, prefix+n+"/", out); err != nil {
				return err
			}
		}
	}
	return nil
}

// Delete implements Backend.
func (l *Local) Delete(ctx context.Context, name string) error {
	dirs, leaf := split(name)
	dfd, err := l.openDir(dirs, false)
	if errors.Is(err, ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	defer unix.Close(dfd)
	if err := unix.Unlinkat(dfd, leaf, 0); err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("artifacts: remove %s: %w", name, err)
	}
	return nil
}

// DeleteAll implements Backend. os.RemoveAll removes links, never what they
// point to.
func (l *Local) DeleteAll(ctx context.Context, prefix string) error {
	p := filepath.Join(l.dir, filepath.FromSlash(strings.TrimSuffix(prefix, "/")))
	if err := os.RemoveAll(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("artifacts: remove %s: %w", prefix, err)
	}
	return nil
}

// Dir is the directory the objects are kept in.
func (l *Local) Dir() string { return l.dir }
