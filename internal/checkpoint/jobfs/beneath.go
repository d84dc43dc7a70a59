package jobfs

import (
	"errors"
	"strings"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// noOpenat2 is set once the kernel (before 5.6) or a seccomp filter has
// refused openat2: resolution then goes one component at a time.
var noOpenat2 atomic.Bool

// beneath opens rel (slash-separated) below the directory dirfd with flags,
// resolving it below dirfd as it is now: no component may be a symbolic
// link (the last one included) or "..", so that a directory the job swaps
// for a link between a look and an open never leads out of the tree. It
// must run as whoever should be checked for the access (inside Do).
func beneath(dirfd int, rel string, flags int) (int, error) {
	if rel == "" {
		rel = "."
	}
	if strings.HasPrefix(rel, "/") || rel == ".." || strings.HasPrefix(rel, "../") ||
		strings.HasSuffix(rel, "/..") || strings.Contains(rel, "/../") {
		return -1, unix.EXDEV
	}
	flags |= unix.O_NOFOLLOW | unix.O_CLOEXEC
	if !noOpenat2.Load() {
		fd, err := unix.Openat2(dirfd, rel, &unix.OpenHow{Flags: uint64(flags),
			Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS})
		if !errors.Is(err, unix.ENOSYS) && !errors.Is(err, unix.EPERM) {
			return fd, err
		}
		noOpenat2.Store(true)
	}
	return beneathByComponent(dirfd, rel, flags)
}

// beneathByComponent is beneath without openat2: each directory on the way
// is opened from the one before, refusing links.
func beneathByComponent(dirfd int, rel string, flags int) (int, error) {
	parts := strings.Split(rel, "/")
	fd, owned := dirfd, false
	closeOwned := func() {
		if owned {
			unix.Close(fd)
		}
	}
	for _, name := range parts[:len(parts)-1] {
		if name == "" || name == "." {
			continue
		}
		next, err := unix.Openat(fd, name, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		closeOwned()
		if err != nil {
			return -1, err
		}
		fd, owned = next, true
	}
	last := parts[len(parts)-1]
	if last == "" {
		last = "."
	}
	nfd, err := unix.Openat(fd, last, flags, 0)
	closeOwned()
	return nfd, err
}

// split cuts rel into its parent directory ("" for d itself) and its last
// name.
func split(rel string) (dir, name string) {
	i := strings.LastIndexByte(rel, '/')
	if i < 0 {
		return "", rel
	}
	return rel[:i], rel[i+1:]
}
