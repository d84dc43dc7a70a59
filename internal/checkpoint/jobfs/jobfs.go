// Package jobfs reaches a job's files as the job itself: workerd runs jobs
// as uids of their own and holds no capability to read other users' files,
// so every look, read and write below a job's directory is made with the
// thread's filesystem identity set to the job's uid and gid. What workerd
// reads there is therefore only ever what the job could read, and what it
// writes belongs to the job. Symbolic links are never followed: a walk
// refuses them, and every path below a held directory is resolved from it
// with no link on the way, so a directory swapped for a link between a walk
// and an open leads nowhere. The switch covers the uid and gid only: the
// process must hold no supplementary groups of its own (workerd drops them
// at start), or they would count too.
package jobfs

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Ident is whose files a job's are: its uid and gid when workerd runs it as
// a user of its own (Switch), else workerd's own.
type Ident struct {
	UID, GID int
	Switch   bool
}

// Do runs f on a thread whose filesystem uid and gid are id's: every file f
// opens, creates, renames or removes is checked as the job's would be, and
// what it creates belongs to the job. f must not start goroutines that
// touch files.
func (id Ident) Do(f func() error) error {
	if !id.Switch {
		return f()
	}
	runtime.LockOSThread()
	oldGID, _ := unix.SetfsgidRetGid(id.GID)
	oldUID, _ := unix.SetfsuidRetUid(id.UID)
	if cur, _ := unix.SetfsuidRetUid(-1); cur != id.UID {
		restore(oldUID, oldGID)
		return fmt.Errorf("cannot act as uid %d for the job's files (workerd needs CAP_SETUID)", id.UID)
	}
	defer restore(oldUID, oldGID)
	return f()
}

// restore gives the thread its own filesystem identity back and releases
// it. A thread that cannot get it back stays locked to its goroutine and is
// ended with it, never reused.
func restore(uid, gid int) {
	_ = unix.Setfsuid(uid)
	_ = unix.Setfsgid(gid)
	if u, _ := unix.SetfsuidRetUid(-1); u != uid {
		return
	}
	if g, _ := unix.SetfsgidRetGid(-1); g != gid {
		return
	}
	runtime.UnlockOSThread()
}

// Dir is a directory below a job's directory, held open so that what lies
// below it is reached as the job whoever owns the directories above (workerd
// takes the job's directory back when the job ends).
type Dir struct {
	fd   int // O_PATH
	id   Ident
	Path string
}

// Open opens rel (slash-separated, inside jobDir; "" is jobDir itself) as a
// Dir. Each component is looked up as the job; one the job cannot reach
// (the job's directory, once workerd has taken it back) is looked up as
// workerd. No component may be a symbolic link. A missing directory is
// fs.ErrNotExist.
func Open(jobDir, rel string, id Ident) (*Dir, error) {
	fd, err := unix.Open(jobDir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: jobDir, Err: err}
	}
	if rel != "" && rel != "." {
		for _, name := range strings.Split(filepath.ToSlash(rel), "/") {
			if name == "" || name == "." || name == ".." {
				unix.Close(fd)
				return nil, fmt.Errorf("%s: not a path inside the job's directory", rel)
			}
			var next int
			err := id.Do(func() (err error) {
				next, err = unix.Openat(fd, name, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
				return err
			})
			if errors.Is(err, unix.EACCES) {
				next, err = unix.Openat(fd, name, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			}
			unix.Close(fd)
			if err != nil {
				if errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.ELOOP) {
					err = fmt.Errorf("not a directory (or a symbolic link): %w", err)
				}
				return nil, &fs.PathError{Op: "open", Path: filepath.Join(jobDir, rel), Err: err}
			}
			fd = next
		}
	}
	return &Dir{fd: fd, id: id, Path: filepath.Join(jobDir, rel)}, nil
}

// Close releases the directory.
func (d *Dir) Close() error { return unix.Close(d.fd) }

// openat opens rel below d as the job, resolved below d without following
// any symbolic link (see beneath).
func (d *Dir) openat(rel string, flags int) (*os.File, error) {
	var fd int
	err := d.id.Do(func() (err error) {
		fd, err = beneath(d.fd, rel, flags)
		return err
	})
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: filepath.Join(d.Path, rel), Err: err}
	}
	return os.NewFile(uintptr(fd), filepath.Join(d.Path, rel)), nil
}

// OpenFile opens the regular file rel below d for reading, as the job.
// Anything else is refused; a named pipe put in a file's place after a walk
// is opened without waiting for a writer (O_NONBLOCK), then refused.
func (d *Dir) OpenFile(rel string) (*os.File, error) {
	f, err := d.openat(rel, unix.O_RDONLY|unix.O_NONBLOCK)
	if err != nil {
		return nil, err
	}
	st, err := f.Stat()
	if err == nil && !st.Mode().IsRegular() {
		err = &UnsafeError{Path: rel, What: describe(st.Mode(), "")}
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// Entry is a name in a directory and its type.
type Entry struct {
	Name string
	Type fs.FileMode // fs.ModeDir, fs.ModeSymlink, … or 0 for a regular file
}

// ReadDir lists the directory rel below d ("" is d), sorted by name.
func (d *Dir) ReadDir(rel string) ([]Entry, error) {
	f, err := d.openat(rel, unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return readDir(f)
}

func readDir(f *os.File) ([]Entry, error) {
	des, err := f.ReadDir(-1)
	if err != nil {
		return nil, err
	}
	out := make([]Entry, 0, len(des))
	for _, de := range des {
		out = append(out, Entry{Name: de.Name(), Type: de.Type()})
	}
	slices.SortFunc(out, func(a, b Entry) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// Exists reports whether rel below d exists (as anything, links included).
func (d *Dir) Exists(rel string) bool {
	parent, name := split(rel)
	var st unix.Stat_t
	err := d.id.Do(func() error {
		pfd, err := beneath(d.fd, parent, unix.O_PATH|unix.O_DIRECTORY)
		if err != nil {
			return err
		}
		defer unix.Close(pfd)
		return unix.Fstatat(pfd, name, &st, unix.AT_SYMLINK_NOFOLLOW)
	})
	return err == nil
}

// File is a regular file a walk found.
type File struct {
	Path string // relative to the walked directory, slash-separated
	Size int64
}

// UnsafeError is a walk's refusal: something other than a regular file or
// a directory lies in the tree.
type UnsafeError struct {
	Path string // relative to the walked directory
	What string // "a symbolic link to /etc", "a named pipe", …
}

func (e *UnsafeError) Error() string { return e.Path + " is " + e.What }

// Walk lists the regular files below the directory rel of d, sorted by
// path. keep, when not nil, is asked about every entry (its path relative to
// rel) first: what it leaves out is neither listed, descended into nor
// refused. Anything else than a regular file or a directory (a symbolic
// link above all) is an *UnsafeError: the tree is not one workerd copies.
// Each directory is read through a descriptor opened from its parent's, so
// a directory swapped for a link while the walk runs is refused, never
// followed.
func (d *Dir) Walk(rel string, keep func(path string, e Entry) bool) ([]File, error) {
	top, err := d.openat(rel, unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		return nil, err
	}
	defer top.Close()
	var out []File
	var walk func(dir *os.File, sub string) error
	walk = func(dir *os.File, sub string) error {
		entries, err := readDir(dir)
		if err != nil {
			return err
		}
		for _, e := range entries {
			p := join(sub, e.Name)
			if keep != nil && !keep(p, e) {
				continue
			}
			switch {
			case e.Type.IsDir():
				child, err := d.child(dir, e.Name, filepath.Join(d.Path, rel, p))
				var errno unix.Errno
				if errors.As(err, &errno) && (errno == unix.ELOOP || errno == unix.ENOTDIR) {
					return &UnsafeError{Path: p, What: "no longer a directory (replaced while it was read)"}
				}
				if err != nil {
					return err
				}
				err = walk(child, p)
				child.Close()
				if err != nil {
					return err
				}
			case e.Type.IsRegular():
				var st unix.Stat_t
				err := d.id.Do(func() error { return unix.Fstatat(int(dir.Fd()), e.Name, &st, unix.AT_SYMLINK_NOFOLLOW) })
				if err != nil {
					return &fs.PathError{Op: "stat", Path: filepath.Join(d.Path, rel, p), Err: err}
				}
				if st.Mode&unix.S_IFMT != unix.S_IFREG {
					return &UnsafeError{Path: p, What: "no longer a regular file"}
				}
				out = append(out, File{Path: p, Size: st.Size})
			default:
				target := ""
				if e.Type&fs.ModeSymlink != 0 {
					target = d.readlink(int(dir.Fd()), e.Name)
				}
				return &UnsafeError{Path: p, What: describe(e.Type, target)}
			}
		}
		return nil
	}
	if err := walk(top, ""); err != nil {
		return nil, err
	}
	return out, nil
}

// child opens the directory name in the open directory dir as the job,
// never following a link.
func (d *Dir) child(dir *os.File, name, path string) (*os.File, error) {
	var fd int
	err := d.id.Do(func() (err error) {
		fd, err = unix.Openat(int(dir.Fd()), name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		return err
	})
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	return os.NewFile(uintptr(fd), path), nil
}

func (d *Dir) readlink(dirfd int, name string) string {
	buf := make([]byte, 512)
	var n int
	err := d.id.Do(func() (err error) {
		n, err = unix.Readlinkat(dirfd, name, buf)
		return err
	})
	if err != nil {
		return "?"
	}
	return string(buf[:n])
}

func describe(m fs.FileMode, target string) string {
	switch {
	case m&fs.ModeSymlink != 0:
		return fmt.Sprintf("a symbolic link (to %q)", target)
	case m&fs.ModeNamedPipe != 0:
		return "a named pipe"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeDevice != 0:
		return "a device file"
	}
	return "not a regular file"
}

func join(a, b string) string {
	switch {
	case a == "" || a == ".":
		return b
	case b == "":
		return a
	}
	return a + "/" + b
}

// MkdirAll makes the directory rel (and its parents) below jobDir as the
// job; jobDir must be the job's at this moment. Each component is made and
// entered from the one before: a symbolic link on the way is refused, never
// followed.
func MkdirAll(jobDir, rel string, id Ident) error {
	return id.Do(func() error {
		fd, err := unix.Open(jobDir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return &fs.PathError{Op: "open", Path: jobDir, Err: err}
		}
		for _, name := range strings.Split(filepath.ToSlash(rel), "/") {
			if name == "" || name == "." {
				continue
			}
			if name == ".." {
				unix.Close(fd)
				return fmt.Errorf("%s: not a path inside the job's directory", rel)
			}
			if err := unix.Mkdirat(fd, name, 0o755); err != nil && !errors.Is(err, unix.EEXIST) {
				unix.Close(fd)
				return &fs.PathError{Op: "mkdir", Path: filepath.Join(jobDir, rel), Err: err}
			}
			next, err := unix.Openat(fd, name, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			unix.Close(fd)
			if err != nil {
				return &fs.PathError{Op: "open", Path: filepath.Join(jobDir, rel), Err: err}
			}
			fd = next
		}
		return unix.Close(fd)
	})
}

// RemoveAll removes path and everything below it as the job.
func RemoveAll(path string, id Ident) error {
	return id.Do(func() error { return os.RemoveAll(path) })
}

// RemoveAll removes the entry name of d, and everything below it when it is
// a directory, as the job. Links are removed, never followed.
func (d *Dir) RemoveAll(name string) error {
	if name == "" || name == "." || name == ".." || strings.Contains(name, "/") {
		return fmt.Errorf("%q: not a name in %s", name, d.Path)
	}
	return d.id.Do(func() error { return removeAt(d.fd, name, filepath.Join(d.Path, name)) })
}

func removeAt(parent int, name, path string) error {
	err := unix.Unlinkat(parent, name, 0)
	switch {
	case err == nil, errors.Is(err, unix.ENOENT):
		return nil
	case !errors.Is(err, unix.EISDIR):
		return &fs.PathError{Op: "remove", Path: path, Err: err}
	}
	fd, err := unix.Openat(parent, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return &fs.PathError{Op: "open", Path: path, Err: err}
	}
	dir := os.NewFile(uintptr(fd), path)
	names, err := dir.Readdirnames(-1)
	for _, n := range names {
		if err != nil {
			break
		}
		err = removeAt(fd, n, filepath.Join(path, n))
	}
	dir.Close()
	if err != nil {
		return err
	}
	if err := unix.Unlinkat(parent, name, unix.AT_REMOVEDIR); err != nil && !errors.Is(err, unix.ENOENT) {
		return &fs.PathError{Op: "remove", Path: path, Err: err}
	}
	return nil
}

// MoveIn moves name from the directory from (workerd's, not the job's) into
// d under the same name, as the job: the job must own what is moved.
func (d *Dir) MoveIn(from, name string) error {
	src, err := unix.Open(from, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return &fs.PathError{Op: "open", Path: from, Err: err}
	}
	defer unix.Close(src)
	err = d.id.Do(func() error { return unix.Renameat(src, name, d.fd, name) })
	if err != nil {
		return &os.LinkError{Op: "rename", Old: filepath.Join(from, name), New: filepath.Join(d.Path, name), Err: err}
	}
	return nil
}

// Chown gives the tree at root (workerd's own, no links followed) to id,
// deepest entries first so that workerd can still reach each one.
func Chown(root string, id Ident) error {
	if !id.Switch {
		return nil
	}
	var paths []string
	err := filepath.WalkDir(root, func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		paths = append(paths, p)
		return nil
	})
	if err != nil {
		return err
	}
	for i := len(paths) - 1; i >= 0; i-- {
		if err := os.Lchown(paths[i], id.UID, id.GID); err != nil {
			return err
		}
	}
	return nil
}

// Sub opens the directory rel below d, as the job, with no link on the way.
func (d *Dir) Sub(rel string) (*Dir, error) {
	var fd int
	err := d.id.Do(func() (err error) {
		fd, err = beneath(d.fd, rel, unix.O_PATH|unix.O_DIRECTORY)
		return err
	})
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: filepath.Join(d.Path, rel), Err: err}
	}
	return &Dir{fd: fd, id: d.id, Path: filepath.Join(d.Path, rel)}, nil
}

// Watch calls add, as the job, with a path that names d's directory itself
// (its descriptor in /proc/self/fd): an inotify watch added through it is
// on the directory d holds, whatever the job renamed or linked since, and
// the job's permissions decide whether it may be watched. The path stays
// d's until d is closed.
func (d *Dir) Watch(add func(path string) error) error {
	return d.id.Do(func() error { return add(d.ProcPath()) })
}

// ProcPath is the path of d's descriptor in /proc/self/fd.
func (d *Dir) ProcPath() string { return "/proc/self/fd/" + strconv.Itoa(d.fd) }
