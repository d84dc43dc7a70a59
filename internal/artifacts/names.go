package artifacts

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Limits on names, chosen so that every name we accept is also a valid S3
// object name and a valid path on common Linux filesystems.
const (
	MaxBucketLen  = 63
	MaxKeyLen     = 1024 // bytes, as S3
	MaxSegmentLen = 255  // bytes, NAME_MAX of ext4, XFS, btrfs
)

// ErrInvalidName is wrapped by every error about a bucket, key or path.
var ErrInvalidName = errors.New("invalid artifact name")

type nameError struct {
	what, name, why string
}

func (e *nameError) Error() string {
	return fmt.Sprintf("%s %q %s", e.what, e.name, e.why)
}

func (e *nameError) Unwrap() error { return ErrInvalidName }

// ValidateBucket checks an upload's bucket: one path segment of 1 to 63
// letters, digits, '.', '-' or '_' that starts with a letter or digit.
// Starting with a letter or digit keeps "." and ".." out, and keeps a bucket
// from ever colliding with the store's own hidden entries (".meta").
func ValidateBucket(b string) error {
	bad := func(why string) error { return &nameError{"bucket", b, why} }
	switch {
	case b == "":
		return bad("is empty")
	case len(b) > MaxBucketLen:
		return bad(fmt.Sprintf("is longer than %d bytes", MaxBucketLen))
	case !isAlnum(b[0]):
		return bad("must start with a letter or digit")
	}
	for i := 0; i < len(b); i++ {
		if c := b[i]; !isAlnum(c) && c != '.' && c != '-' && c != '_' {
			return bad(fmt.Sprintf("has %q at byte %d; only letters, digits, '.', '-' and '_' are allowed", c, i))
		}
	}
	return nil
}

// ValidateKey checks an object key: a relative, slash-separated path of at
// most 1024 bytes of UTF-8 with no empty, "." or ".." segment, no NUL or
// other control character and no backslash, each segment at most 255 bytes.
// Such a key can name nothing outside the directory it is joined to.
func ValidateKey(k string) error {
	bad := func(why string) error { return &nameError{"key", k, why} }
	switch {
	case k == "":
		return bad("is empty")
	case len(k) > MaxKeyLen:
		return bad(fmt.Sprintf("is longer than %d bytes", MaxKeyLen))
	case !utf8.ValidString(k):
		return bad("is not valid UTF-8")
	case k[0] == '/':
		return bad("is absolute (starts with '/')")
	}
	for i, r := range k {
		switch {
		case r == 0:
			return bad(fmt.Sprintf("has a NUL byte at %d", i))
		case r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0):
			return bad(fmt.Sprintf("has the control character %U at byte %d", r, i))
		case r == '\\':
			return bad(fmt.Sprintf("has a backslash at byte %d; use '/' between segments", i))
		}
	}
	for seg := range strings.SplitSeq(k, "/") {
		switch {
		case seg == "":
			return bad("has an empty segment ('//' or a trailing '/')")
		case seg == "." || seg == "..":
			return bad(fmt.Sprintf("has a %q segment", seg))
		case len(seg) > MaxSegmentLen:
			return bad(fmt.Sprintf("has a segment longer than %d bytes", MaxSegmentLen))
		}
	}
	return nil
}

// SplitPath splits a job-relative artifact path "bucket/key" and validates both.
func SplitPath(p string) (bucket, key string, err error) {
	bucket, key, ok := strings.Cut(p, "/")
	if !ok {
		return "", "", &nameError{"path", p, "must be bucket/key"}
	}
	if err := ValidateBucket(bucket); err != nil {
		return "", "", err
	}
	if err := ValidateKey(key); err != nil {
		return "", "", err
	}
	return bucket, key, nil
}

// validJobID accepts the ids the orchestrator makes ("j_" and base-32
// characters) and anything of the same alphabet; a job id becomes a directory.
func validJobID(id string) error {
	if id == "" || len(id) > 64 || !isAlnum(id[0]) {
		return &nameError{"job id", id, "is not a job id"}
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; !isAlnum(c) && c != '_' && c != '-' {
			return &nameError{"job id", id, "is not a job id"}
		}
	}
	return nil
}

func isAlnum(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

// Ref names one object: a key in a bucket, uploaded by an attempt of a job.
type Ref struct {
	JobID   string
	Attempt int
	Bucket  string
	Key     string
}

// Path is the object's name inside its attempt: "bucket/key".
func (r Ref) Path() string { return r.Bucket + "/" + r.Key }

// Validate checks every part of the reference.
func (r Ref) Validate() error {
	if err := validJobID(r.JobID); err != nil {
		return err
	}
	if r.Attempt < 1 {
		return &nameError{"attempt", strconv.Itoa(r.Attempt), "must be 1 or more"}
	}
	if err := ValidateBucket(r.Bucket); err != nil {
		return err
	}
	return ValidateKey(r.Key)
}

// The layout below the storage root, the same for every backend:
//
//	<job>/<attempt>/<bucket>/<key>         the object's bytes
//	<job>/<attempt>/.meta/<bucket>/<key>   its size and checksums (JSON)
//
// The metadata tree mirrors the data tree, so two keys clash in one exactly
// when they clash in the other. Buckets start with a letter or digit, so
// ".meta" is never a bucket.
const metaDir = ".meta"

func attemptPrefix(job string, attempt int) string { return job + "/" + strconv.Itoa(attempt) + "/" }

func (r Ref) dataName() string { return attemptPrefix(r.JobID, r.Attempt) + r.Path() }

func (r Ref) metaName() string { return attemptPrefix(r.JobID, r.Attempt) + metaDir + "/" + r.Path() }

// parseName splits a stored name below a job's prefix back into its attempt,
// whether it is metadata, and its "bucket/key" path. ok is false for names
// that are not part of the layout (left-overs, foreign files).
func parseName(job, name string) (attempt int, meta bool, path string, ok bool) {
	rest, found := strings.CutPrefix(name, job+"/")
	if !found {
		return 0, false, "", false
	}
	num, rest, found := strings.Cut(rest, "/")
	n, err := strconv.Atoi(num)
	if !found || err != nil || n < 1 || strconv.Itoa(n) != num {
		return 0, false, "", false
	}
	if m, isMeta := strings.CutPrefix(rest, metaDir+"/"); isMeta {
		rest, meta = m, true
	}
	if _, _, err := SplitPath(rest); err != nil {
		return 0, false, "", false
	}
	return n, meta, rest, true
}
