package isolation

import (
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"os"
	"os/user"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// identity is who a job runs as.
type identity struct {
	uid, gid uint32
	groups   []uint32
}

// jobUser resolves the configured job user: its uid, primary group and
// supplementary groups (video, render, … for the GPU device nodes).
func jobUser(name string) (uid, gid uint32, groups []uint32, err error) {
	u, err := user.Lookup(name)
	if errors.As(err, new(user.UnknownUserError)) {
		return 0, 0, nil, fmt.Errorf("%q does not exist", name)
	}
	if err != nil {
		return 0, 0, nil, fmt.Errorf("%q: %w", name, err)
	}
	n, err1 := strconv.ParseUint(u.Uid, 10, 32)
	g, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err := errors.Join(err1, err2); err != nil {
		return 0, 0, nil, fmt.Errorf("%q: %w", name, err)
	}
	ids, _ := u.GroupIds()
	for _, id := range ids {
		if v, err := strconv.ParseUint(id, 10, 32); err == nil && v != g {
			groups = append(groups, uint32(v))
		}
	}
	return uint32(n), uint32(g), groups, nil
}

// canSwitchUsers reports whether this process may start jobs as other users:
// it needs CAP_SETUID and CAP_SETGID in its effective set (root has them
// unless a unit's bounding set took them away).
func canSwitchUsers() bool {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "CapEff:"); ok {
			caps, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			const setgid, setuid = 1 << 6, 1 << 7
			return err == nil && caps&setuid != 0 && caps&setgid != 0
		}
	}
	return false
}

// uidRange is the span of uids jobs get one of each, inclusive.
type uidRange struct{ lo, hi uint32 }

func (r uidRange) size() uint32 { return r.hi - r.lo + 1 }

func (r uidRange) contains(uid uint32) bool { return uid >= r.lo && uid <= r.hi }

// uidPool hands out the uids of running jobs: no two running jobs share one,
// across every workerd on the machine. Within a workerd a map says which are
// taken; between workerds (one per GPU, say, all with the default range) a
// lock file does: a job's uid is a one-byte lock at offset uid (an open file
// description lock), held while the job runs and dropped by the kernel when
// the workerd holding it dies. Taking or giving back a uid is one fcntl(2),
// no file created. A job prefers the uid its earlier attempts had (so it can
// reach its own checkpoints), else one derived from its id, probing onward
// when taken.
type uidPool struct {
	r     uidRange
	locks *os.File // nil when this workerd is the only user of the range (tests)
	mu    sync.Mutex
	inUse map[uint32]bool
}

// DefaultUIDLockFile is where workerds on one machine lock the job uids they
// use; /run is cleared at boot, when no job runs.
const DefaultUIDLockFile = "/run/simpletuner-job-uids.lock"

func newUIDPool(r uidRange, lockFile string) (*uidPool, error) {
	p := &uidPool{r: r, inUse: map[uint32]bool{}}
	if lockFile != "" {
		f, err := os.OpenFile(lockFile, os.O_RDWR|os.O_CREATE|syscall.O_CLOEXEC, 0o600)
		if err != nil {
			return nil, fmt.Errorf("job uid locks: %w", err)
		}
		p.locks = f
	}
	return p, nil
}

// take reserves a uid for jobID; prefer (0 for none) is tried first.
func (p *uidPool) take(jobID string, prefer uint32) (uint32, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if prefer != 0 && p.r.contains(prefer) && p.tryLocked(prefer) {
		return prefer, nil
	}
	h := fnv.New32a()
	h.Write([]byte(jobID))
	start := h.Sum32() % p.r.size()
	for i := uint32(0); i < p.r.size(); i++ {
		if uid := p.r.lo + (start+i)%p.r.size(); p.tryLocked(uid) {
			return uid, nil
		}
	}
	return 0, fmt.Errorf("all %d job uids (%d-%d) are in use", p.r.size(), p.r.lo, p.r.hi)
}

// tryLocked takes uid if neither this workerd nor another holds it.
func (p *uidPool) tryLocked(uid uint32) bool {
	if p.inUse[uid] || (p.locks != nil && p.lock(uid, unix.F_WRLCK) != nil) {
		return false
	}
	p.inUse[uid] = true
	return true
}

// lock sets (F_WRLCK) or drops (F_UNLCK) the byte at offset uid.
func (p *uidPool) lock(uid uint32, typ int16) error {
	lk := unix.Flock_t{Type: typ, Whence: io.SeekStart, Start: int64(uid), Len: 1}
	return unix.FcntlFlock(p.locks.Fd(), unix.F_OFD_SETLK, &lk)
}

func (p *uidPool) release(uid uint32) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.inUse[uid] && p.locks != nil {
		_ = p.lock(uid, unix.F_UNLCK)
	}
	delete(p.inUse, uid)
}

func (p *uidPool) close() {
	if p.locks != nil {
		p.locks.Close()
	}
}
