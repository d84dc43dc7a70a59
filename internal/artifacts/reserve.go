package artifacts

import (
	"fmt"
	"sync"

	"golang.org/x/sys/unix"
)

// The per-job limits bound what one job stores, not what all of them store
// together: many jobs (or one job with small files) could still fill the
// filesystem and make every other job's checkpoints fail. The reserve is the
// share of the filesystem's bytes and inodes that an upload must leave free;
// an upload that would eat into it is refused, so the last few percent are
// always there for the others' checkpoints (and for the database, when it
// shares the disk).

// Space is what a filesystem holds and has free.
type Space struct {
	TotalBytes, FreeBytes   int64 // FreeBytes: what an unprivileged writer may still use
	TotalInodes, FreeInodes int64 // TotalInodes 0: the filesystem has no fixed inode count
}

// SpaceReporter is a backend on a filesystem whose free space can be asked
// (the local disk; an S3 service has no such thing).
type SpaceReporter interface {
	Space() (Space, error)
}

// Space implements SpaceReporter.
func (l *Local) Space() (Space, error) {
	var st unix.Statfs_t
	if err := unix.Fstatfs(int(l.root.Fd()), &st); err != nil {
		return Space{}, fmt.Errorf("artifacts: statfs %s: %w", l.dir, err)
	}
	bs := int64(st.Bsize)
	return Space{TotalBytes: int64(st.Blocks) * bs, FreeBytes: int64(st.Bavail) * bs,
		TotalInodes: int64(st.Files), FreeInodes: int64(st.Ffree)}, nil
}

// ReserveError is returned when an upload would leave less than the reserve
// free on the artifacts' filesystem; nothing of it is kept.
type ReserveError struct {
	Percent  float64 // the reserve in force
	Resource string  // "bytes" or "inodes"
	Free     int64   // free when refused
	Reserved int64   // the reserve in that resource
}

func (e *ReserveError) Error() string {
	return fmt.Sprintf("the upload would leave less than the artifacts' disk reserve free "+
		"(artifacts.reserve_percent = %g %% of its %s: %d of them are kept free for other jobs' checkpoints; %d are free)",
		e.Percent, e.Resource, e.Reserved, e.Free)
}

// reserve tracks what uploads in progress have announced but not yet
// written, so that parallel uploads cannot each count the same free space.
type reserve struct {
	mu     sync.Mutex
	bytes  int64 // announced bytes not yet received
	inodes int64 // files and directories uploads in progress will make
}

// checkEvery is how many received bytes of an upload of unknown length pass
// between two looks at the filesystem: statfs is cheap, but not per read.
const checkEvery = 4 << 20

// fits reports (as a *ReserveError) whether taking bytes and inodes more,
// beyond what uploads in progress have already claimed, keeps the reserve
// free. pct 0 or a backend without a filesystem always fits.
func (s *Store) fits(pct float64, bytes, inodes int64) error {
	sr, ok := s.b.(SpaceReporter)
	if !ok || pct <= 0 {
		return nil
	}
	sp, err := sr.Space()
	if err != nil {
		return err
	}
	s.res.mu.Lock()
	claimedBytes, claimedInodes := s.res.bytes, s.res.inodes
	s.res.mu.Unlock()
	if want := reserved(pct, sp.TotalBytes); sp.FreeBytes-claimedBytes-bytes < want {
		return &ReserveError{Percent: pct, Resource: "bytes", Free: sp.FreeBytes, Reserved: want}
	}
	if sp.TotalInodes > 0 {
		if want := reserved(pct, sp.TotalInodes); sp.FreeInodes-claimedInodes-inodes < want {
			return &ReserveError{Percent: pct, Resource: "inodes", Free: sp.FreeInodes, Reserved: want}
		}
	}
	return nil
}

// reserved is pct % of total, rounded up.
func reserved(pct float64, total int64) int64 {
	r := int64(float64(total) * pct / 100)
	if float64(r) < float64(total)*pct/100 {
		r++
	}
	return r
}

func (s *Store) addClaim(bytes, inodes int64) {
	s.res.mu.Lock()
	s.res.bytes += bytes
	s.res.inodes += inodes
	s.res.mu.Unlock()
}

// spaceClaim is one upload's share of the filesystem while it runs: what it
// announced and has not written yet (written bytes show in the filesystem's
// own count), and the inodes it may make.
type spaceClaim struct {
	s         *Store
	pct       float64
	bytes     int64
	inodes    int64
	unchecked int64 // bytes received since the filesystem was last looked at
}

// claimSpace refuses an upload of bytes (announced; 0 when unknown) under
// path that would eat into the reserve, and otherwise claims its share.
func (s *Store) claimSpace(pct float64, path string, bytes int64) (*spaceClaim, error) {
	c := &spaceClaim{s: s, pct: pct, bytes: bytes, inodes: inodesOf(path)}
	if err := s.fits(pct, c.bytes, c.inodes); err != nil {
		return nil, err
	}
	s.addClaim(c.bytes, c.inodes)
	return c, nil
}

// received accounts n bytes written, and looks at the filesystem again every
// checkEvery bytes: an upload of unknown length (or others beside it) may
// reach the reserve while it streams.
func (c *spaceClaim) received(n int64) error {
	written := min(n, c.bytes)
	c.bytes -= written
	c.s.addClaim(-written, 0)
	if c.unchecked += n; c.unchecked < checkEvery {
		return nil
	}
	c.unchecked = 0
	return c.s.fits(c.pct, 0, 0)
}

// done gives back what the upload still claims.
func (c *spaceClaim) done() {
	c.s.addClaim(-c.bytes, -c.inodes)
	c.bytes, c.inodes = 0, 0
}

// inodesOf is how many files and directories an object under path may make:
// its file and directories, twice (the checksum record mirrors the path),
// and its temporary file.
func inodesOf(path string) int64 { return overhead(path) / EntryCost }
