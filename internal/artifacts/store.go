package artifacts

import (
	"bytes"
	"context"
	"crypto/md5"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Limits bound what jobs may store. All but ReservePercent must be positive.
type Limits struct {
	MaxObjectBytes int64 // one object
	// MaxJobBytes bounds every object of every attempt of one job, each
	// charged its size and what its files and directories cost (see Charge).
	MaxJobBytes   int64
	MaxJobObjects int // objects of every attempt of one job
	// ReservePercent is the share of the local filesystem's bytes and
	// inodes that every upload must leave free, for all jobs together (0:
	// none). It has no meaning on S3.
	ReservePercent float64
}

// MaxKeyDepth is the most segments an uploaded key may have: each is a
// directory on the local disk (twice: the checksum records mirror the tree),
// and a deep tree of empty directories costs inodes and blocks its bytes do
// not show. Deeper keys stored before the limit existed still list and
// download.
const MaxKeyDepth = 16

// EntryCost is what a job's quota is charged for each file or directory it
// makes, beyond the bytes of its objects: about a block and an inode.
const EntryCost = 4 << 10

// Charge is what an object of size bytes under path ("bucket/key") costs its
// job's quota: its bytes, and its file and directories twice over (the
// object and its checksum record), plus a block for the last, partly used
// one. Charging directories to every object that passes through them
// overcounts shared ones, which keeps the count cheap and on the safe side.
func Charge(path string, size int64) int64 {
	return size + overhead(path)
}

func overhead(path string) int64 {
	return EntryCost * (2*int64(1+strings.Count(path, "/")) + 1)
}

// TooLargeError is returned when an upload would pass a limit; nothing of it
// is kept.
type TooLargeError struct {
	Limit int64
	Of    string // "object", "job" or "objects"
}

func (e *TooLargeError) Error() string {
	switch e.Of {
	case "job":
		return fmt.Sprintf("the job's artifacts would exceed max_job_bytes (%d bytes, counting %d bytes for each file and directory)",
			e.Limit, EntryCost)
	case "objects":
		return fmt.Sprintf("the job has max_job_objects (%d) artifacts already", e.Limit)
	}
	return fmt.Sprintf("the object exceeds max_object_bytes (%d bytes)", e.Limit)
}

// Object describes a stored object.
type Object struct {
	Attempt  int
	Path     string // "bucket/key"
	Size     int64
	MD5      string // hex; "" when its metadata is missing (a crash between the two writes)
	SHA256   string // hex; as MD5
	Modified time.Time
}

// ETag is the object's entity tag as S3 clients expect it: the quoted hex MD5
// of its bytes ("" when unknown).
func (o Object) ETag() string {
	if o.MD5 == "" {
		return ""
	}
	return `"` + o.MD5 + `"`
}

// Store keeps jobs' artifacts in a Backend and enforces the limits. It is
// safe for concurrent use.
type Store struct {
	b      Backend
	limits atomic.Pointer[Limits]
	// now is the clock for modification times (tests may replace it).
	now func() time.Time

	mu   sync.Mutex
	jobs map[string]*usage // jobs with an upload in progress in this process

	res reserve // what uploads in progress claim of the filesystem
}

// usage is a job's byte count while it has uploads in progress. Uploads of one
// job in this process share it, so two parallel uploads cannot each take the
// whole remaining budget. (Orchestrators sharing a database do not share it:
// each sees only the objects already stored by the others.)
type usage struct {
	stored   int64 // charge of stored objects when first counted, plus commits since
	inflight int64 // bytes received by uploads in progress, and their overheads
	replaced int64 // charge of stored objects that uploads in progress will replace
	objects  int   // stored objects, plus new ones being uploaded
	refs     int
	// counted is closed once stored and objects hold the count of the
	// objects on disk (err when that failed). Uploads of the job wait for it,
	// so that none commits while the count is made.
	counted chan struct{}
	err     error
}

// New returns a Store over b with the given limits.
func New(b Backend, l Limits) *Store {
	s := &Store{b: b, now: time.Now, jobs: map[string]*usage{}}
	s.SetLimits(l)
	return s
}

// SetLimits changes the limits for uploads that start from now on.
func (s *Store) SetLimits(l Limits) { s.limits.Store(&l) }

// Limits returns the limits in force.
func (s *Store) Limits() Limits { return *s.limits.Load() }

// Backend is where the bytes live.
func (s *Store) Backend() Backend { return s.b }

// Put streams body into the object ref. declared is the length the client
// announced (-1 when unknown); an announcement over a limit is refused before
// a byte is read. The body is hashed (MD5 for the ETag, SHA-256 for
// integrity) and counted as it arrives; passing a limit stops the upload with
// a *TooLargeError. Once the body is complete, stillAllowed is asked whether
// the uploader may still store (its attempt may have been replaced meanwhile);
// only then does the object appear, whole. On any error nothing new is kept.
func (s *Store) Put(ctx context.Context, ref Ref, body io.Reader, declared int64, stillAllowed func() error) (Object, error) {
	if err := ref.Validate(); err != nil {
		return Object{}, err
	}
	if n := strings.Count(ref.Key, "/") + 1; n > MaxKeyDepth {
		return Object{}, &nameError{"key", ref.Key, fmt.Sprintf("has %d segments; at most %d", n, MaxKeyDepth)}
	}
	lim := s.Limits()
	if declared > lim.MaxObjectBytes {
		return Object{}, &TooLargeError{Limit: lim.MaxObjectBytes, Of: "object"}
	}
	space, err := s.claimSpace(lim.ReservePercent, ref.Path(), max(declared, 0))
	if err != nil {
		return Object{}, err
	}
	defer space.done()
	u, err := s.begin(ctx, ref.JobID)
	if err != nil {
		return Object{}, err
	}
	defer s.end(ref.JobID, u)

	var old int64 // the charge of the object this one replaces
	isNew := false
	if e, err := s.b.Stat(ctx, ref.dataName()); err == nil {
		old = Charge(ref.Path(), e.Size)
	} else if errors.Is(err, ErrNotFound) {
		isNew = true
	} else {
		return Object{}, unavailable(err)
	}
	over := overhead(ref.Path())
	s.mu.Lock()
	switch {
	case isNew && u.objects >= lim.MaxJobObjects:
		s.mu.Unlock()
		return Object{}, &TooLargeError{Limit: int64(lim.MaxJobObjects), Of: "objects"}
	case u.stored-u.replaced-old+u.inflight+over+max(declared, 0) > lim.MaxJobBytes:
		s.mu.Unlock()
		return Object{}, &TooLargeError{Limit: lim.MaxJobBytes, Of: "job"}
	}
	u.replaced += old
	u.inflight += over
	if isNew {
		u.objects++
	}
	s.mu.Unlock()

	m := &meter{r: body, md5: md5.New(), sha: sha256.New(), max: lim.MaxObjectBytes,
		grow: func(n int64) error {
			if err := space.received(n); err != nil {
				return err
			}
			return s.grow(u, n, lim.MaxJobBytes)
		}}
	var refused error // stillAllowed's answer: not the backend's
	commit := func() error {
		if stillAllowed != nil {
			if refused = stillAllowed(); refused != nil {
				return refused
			}
		}
		// The old record must go before the new bytes arrive: a crash in
		// between then leaves an object without checksums, never an object
		// with someone else's.
		return s.b.Delete(ctx, ref.metaName())
	}
	err = s.b.Put(ctx, ref.dataName(), m, commit)
	if err != nil && refused == nil && m.err == nil {
		err = unavailable(err)
	}

	s.mu.Lock()
	u.inflight -= m.n + over
	u.replaced -= old
	switch {
	case err == nil:
		u.stored += Charge(ref.Path(), m.n) - old
	case isNew:
		u.objects--
	}
	s.mu.Unlock()
	if err != nil {
		return Object{}, err
	}
	obj := Object{Attempt: ref.Attempt, Path: ref.Path(), Size: m.n,
		MD5: hex.EncodeToString(m.md5.Sum(nil)), SHA256: hex.EncodeToString(m.sha.Sum(nil)),
		Modified: s.now().UTC().Truncate(time.Second)}
	rec := meta{Version: metaVersion, Size: obj.Size, MD5: obj.MD5, SHA256: obj.SHA256, Modified: obj.Modified}
	// The object is stored; its record is written even if the client has gone.
	if err := s.b.Put(context.WithoutCancel(ctx), ref.metaName(), bytes.NewReader(rec.encode()), nil); err != nil {
		return obj, fmt.Errorf("stored %s, but not its checksums: %w", ref.Path(), unavailable(err))
	}
	return obj, nil
}

func (s *Store) begin(ctx context.Context, job string) (*usage, error) {
	s.mu.Lock()
	u, ok := s.jobs[job]
	if !ok {
		u = &usage{counted: make(chan struct{})}
		s.jobs[job] = u
	}
	u.refs++
	s.mu.Unlock()
	if ok {
		select {
		case <-u.counted:
		case <-ctx.Done():
			s.end(job, u)
			return nil, ctx.Err()
		}
		if u.err != nil {
			s.end(job, u)
			return nil, u.err
		}
		return u, nil
	}
	stored, objects, err := s.JobUsage(ctx, job)
	s.mu.Lock()
	u.stored, u.objects, u.err = stored, objects, err
	s.mu.Unlock()
	close(u.counted)
	if err != nil {
		s.end(job, u)
		return nil, err
	}
	return u, nil
}

func (s *Store) end(job string, u *usage) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if u.refs--; u.refs == 0 && s.jobs[job] == u {
		delete(s.jobs, job)
	}
}

// grow accounts n more received bytes, refusing them past the job's limit.
func (s *Store) grow(u *usage, n, limit int64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if u.stored-u.replaced+u.inflight+n > limit {
		return &TooLargeError{Limit: limit, Of: "job"}
	}
	u.inflight += n
	return nil
}

// meter hashes and counts what passes through it and enforces the limits.
type meter struct {
	r        io.Reader
	md5, sha hash.Hash
	n        int64
	max      int64
	grow     func(int64) error
	err      error
}

func (m *meter) Read(p []byte) (int, error) {
	if m.err != nil {
		return 0, m.err
	}
	// Never read more than one byte past the object limit: that byte proves
	// the body too large without taking in more.
	if room := m.max - m.n + 1; int64(len(p)) > room {
		p = p[:room]
	}
	n, err := m.r.Read(p)
	if n > 0 {
		if m.n+int64(n) > m.max {
			m.err = &TooLargeError{Limit: m.max, Of: "object"}
			return 0, m.err
		}
		if gerr := m.grow(int64(n)); gerr != nil {
			m.err = gerr
			return 0, m.err
		}
		m.n += int64(n)
		m.md5.Write(p[:n])
		m.sha.Write(p[:n])
	}
	if err != nil && err != io.EOF {
		m.err = err
	}
	return n, err
}

// List returns a job's objects, of one attempt or (attempt 0) of all, newest
// attempt first and by path within an attempt.
func (s *Store) List(ctx context.Context, job string, attempt int) ([]Object, error) {
	if err := validJobID(job); err != nil {
		return nil, err
	}
	prefix := job + "/"
	if attempt > 0 {
		prefix = attemptPrefix(job, attempt)
	}
	entries, err := s.b.List(ctx, prefix)
	if err != nil {
		return nil, unavailable(err)
	}
	type key struct {
		attempt int
		path    string
	}
	data := map[key]Entry{}
	hasMeta := map[key]bool{}
	for _, e := range entries {
		n, isMeta, path, ok := parseName(job, e.Name)
		if !ok {
			continue
		}
		if isMeta {
			hasMeta[key{n, path}] = true
		} else {
			data[key{n, path}] = e
		}
	}
	out := make([]Object, 0, len(data))
	for k, e := range data {
		out = append(out, Object{Attempt: k.attempt, Path: k.path, Size: e.Size, Modified: e.Modified.UTC()})
	}
	// Checksums come from the metadata records; read them a few at a time
	// (each is a request on S3).
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	for i := range out {
		k := key{out[i].Attempt, out[i].Path}
		if !hasMeta[k] {
			continue
		}
		wg.Add(1)
		sem <- struct{}{}
		go func(o *Object) {
			defer func() { <-sem; wg.Done() }()
			s.fill(ctx, job, o)
		}(&out[i])
	}
	wg.Wait()
	sort.Slice(out, func(i, j int) bool {
		if out[i].Attempt != out[j].Attempt {
			return out[i].Attempt > out[j].Attempt
		}
		return out[i].Path < out[j].Path
	})
	return out, ctx.Err()
}

// fill adds the checksums from o's metadata record when that record agrees
// with the object's size (a mismatch means the record is not this object's).
func (s *Store) fill(ctx context.Context, job string, o *Object) {
	bucket, key, err := SplitPath(o.Path)
	if err != nil {
		return
	}
	ref := Ref{JobID: job, Attempt: o.Attempt, Bucket: bucket, Key: key}
	r, _, err := s.b.Open(ctx, ref.metaName())
	if err != nil {
		return
	}
	defer r.Close()
	b, err := io.ReadAll(io.LimitReader(r, maxMetaBytes+1))
	if err != nil {
		return
	}
	m, err := decodeMeta(b)
	if err != nil || m.Size != o.Size {
		return
	}
	o.MD5, o.SHA256, o.Modified = m.MD5, m.SHA256, m.Modified.UTC()
}

// Open opens one object for reading.
func (s *Store) Open(ctx context.Context, ref Ref) (Reader, Object, error) {
	if err := ref.Validate(); err != nil {
		return nil, Object{}, err
	}
	r, e, err := s.b.Open(ctx, ref.dataName())
	if err != nil {
		return nil, Object{}, unavailable(err)
	}
	o := Object{Attempt: ref.Attempt, Path: ref.Path(), Size: e.Size, Modified: e.Modified.UTC()}
	s.fill(ctx, ref.JobID, &o)
	return r, o, nil
}

// JobUsage is what every object of every attempt of a job is charged (see
// Charge), and how many objects there are.
func (s *Store) JobUsage(ctx context.Context, job string) (charged int64, objects int, err error) {
	if err := validJobID(job); err != nil {
		return 0, 0, err
	}
	entries, err := s.b.List(ctx, job+"/")
	if err != nil {
		return 0, 0, unavailable(err)
	}
	for _, e := range entries {
		if _, isMeta, path, ok := parseName(job, e.Name); ok && !isMeta {
			charged += Charge(path, e.Size)
			objects++
		}
	}
	return charged, objects, nil
}

// DeleteJob removes every artifact of a job (for retention).
func (s *Store) DeleteJob(ctx context.Context, job string) error {
	if err := validJobID(job); err != nil {
		return err
	}
	return unavailable(s.b.DeleteAll(ctx, job+"/"))
}
