package artifacts

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strings"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// S3Config locates a bucket on an S3-compatible service (MinIO, Ceph RGW,
// AWS S3, …).
type S3Config struct {
	// Endpoint is the service's URL: "https://s3.eu-west-1.amazonaws.com",
	// "http://minio.internal:9000". The scheme picks TLS.
	Endpoint string
	Bucket   string
	Region   string // "" lets the client discover it
	// Prefix is prepended to every object name ("" or ending in "/"), so one
	// bucket can serve several orchestrators or other uses.
	Prefix string
	// AccessKey and SecretKey are static credentials; with both empty the
	// standard AWS_* / MINIO_* environment variables and then the instance's
	// IAM role are used.
	AccessKey string
	SecretKey string
	// PartSize is the size of each part of a multipart upload, which is also
	// the memory one upload holds. 0 picks 16 MiB.
	PartSize uint64
}

// DefaultPartSize bounds an upload's memory on S3 to 16 MiB; with S3's
// 10,000 parts it allows objects up to 156 GiB.
const DefaultPartSize = 16 << 20

// S3 keeps objects in a bucket of an S3-compatible service, with the same
// layout as Local below an optional prefix. Uploads are streamed as multipart
// uploads of PartSize parts, completed only when the body ended cleanly and
// the commit check passed; otherwise the upload is aborted and no object
// appears.
type S3 struct {
	c        *minio.Client
	bucket   string
	prefix   string
	partSize uint64
	desc     string
}

// NewS3 connects to the service and checks that the bucket exists.
func NewS3(ctx context.Context, cfg S3Config) (*S3, error) {
	u, err := url.Parse(cfg.Endpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || strings.Trim(u.Path, "/") != "" {
		return nil, fmt.Errorf("S3 endpoint %q must be http(s)://host[:port] without a path", cfg.Endpoint)
	}
	var creds *credentials.Credentials
	if cfg.AccessKey != "" || cfg.SecretKey != "" {
		creds = credentials.NewStaticV4(cfg.AccessKey, cfg.SecretKey, "")
	} else {
		creds = credentials.NewChainCredentials([]credentials.Provider{
			&credentials.EnvAWS{}, &credentials.EnvMinio{}, &credentials.IAM{},
		})
	}
	c, err := minio.New(u.Host, &minio.Options{Creds: creds, Secure: u.Scheme == "https", Region: cfg.Region})
	if err != nil {
		return nil, fmt.Errorf("S3 endpoint %s: %w", cfg.Endpoint, err)
	}
	part := cfg.PartSize
	if part == 0 {
		part = DefaultPartSize
	}
	s := &S3{c: c, bucket: cfg.Bucket, prefix: cfg.Prefix, partSize: part,
		desc: "s3 " + strings.TrimSuffix(cfg.Endpoint, "/") + "/" + cfg.Bucket + "/" + cfg.Prefix}
	ok, err := c.BucketExists(ctx, cfg.Bucket)
	if err != nil {
		return nil, fmt.Errorf("S3 bucket %q at %s: %w", cfg.Bucket, cfg.Endpoint, err)
	}
	if !ok {
		return nil, fmt.Errorf("S3 bucket %q does not exist at %s; create it first", cfg.Bucket, cfg.Endpoint)
	}
	return s, nil
}

func (s *S3) String() string { return s.desc }

// notFound maps the service's "no such key" answers to ErrNotFound.
func notFound(err error) error {
	switch minio.ToErrorResponse(err).Code {
	case "NoSuchKey", "NotFound", "NoSuchObject":
		return ErrNotFound
	}
	return err
}

// Put implements Backend.
func (s *S3) Put(ctx context.Context, name string, body io.Reader, commit func() error) error {
	r := &commitAtEOF{r: body, commit: commit}
	_, err := s.c.PutObject(ctx, s.bucket, s.prefix+name, r, -1, minio.PutObjectOptions{
		PartSize:    s.partSize,
		ContentType: "application/octet-stream",
	})
	if r.err != nil {
		return r.err // the body's or the commit's own error, not the client's wrapping
	}
	return err
}

// commitAtEOF runs commit when the body ends cleanly and turns its failure
// into a read error: the S3 client then aborts the multipart upload instead
// of completing it, so a refused commit leaves no object.
type commitAtEOF struct {
	r      io.Reader
	commit func() error
	done   bool
	err    error
}

func (c *commitAtEOF) Read(p []byte) (int, error) {
	if c.err != nil {
		return 0, c.err
	}
	n, err := c.r.Read(p)
	switch {
	case err == io.EOF && !c.done:
		c.done = true
		if c.commit != nil {
			if cerr := c.commit(); cerr != nil {
				c.err = cerr
				return n, cerr
			}
		}
	case err != nil && err != io.EOF:
		// The S3 client takes io.ErrUnexpectedEOF for the short last part of
		// a stream and would complete the upload; a truncated HTTP body fails
		// with exactly that error. Wrapped, it is a failure the client aborts on.
		c.err = err
		return n, &bodyError{err}
	}
	return n, err
}

type bodyError struct{ err error }

func (e *bodyError) Error() string { return "reading the upload: " + e.err.Error() }
func (e *bodyError) Unwrap() error { return e.err }

// Open implements Backend. The object reads lazily, so seeking (Range
// requests) fetches only what is read.
func (s *S3) Open(ctx context.Context, name string) (Reader, Entry, error) {
	obj, err := s.c.GetObject(ctx, s.bucket, s.prefix+name, minio.GetObjectOptions{})
	if err != nil {
		return nil, Entry{}, notFound(err)
	}
	info, err := obj.Stat()
	if err != nil {
		obj.Close()
		return nil, Entry{}, notFound(err)
	}
	return obj, Entry{Name: name, Size: info.Size, Modified: info.LastModified.UTC()}, nil
}

// Stat implements Backend.
func (s *S3) Stat(ctx context.Context, name string) (Entry, error) {
	info, err := s.c.StatObject(ctx, s.bucket, s.prefix+name, minio.StatObjectOptions{})
	if err != nil {
		return Entry{}, notFound(err)
	}
	return Entry{Name: name, Size: info.Size, Modified: info.LastModified.UTC()}, nil
}

// List implements Backend.
func (s *S3) List(ctx context.Context, prefix string) ([]Entry, error) {
	var out []Entry
	for obj := range s.c.ListObjects(ctx, s.bucket, minio.ListObjectsOptions{Prefix: s.prefix + prefix, Recursive: true}) {
		if obj.Err != nil {
			return nil, obj.Err
		}
		out = append(out, Entry{Name: strings.TrimPrefix(obj.Key, s.prefix), Size: obj.Size, Modified: obj.LastModified.UTC()})
	}
	return out, nil
}

// Delete implements Backend.
func (s *S3) Delete(ctx context.Context, name string) error {
	err := s.c.RemoveObject(ctx, s.bucket, s.prefix+name, minio.RemoveObjectOptions{})
	if errors.Is(notFound(err), ErrNotFound) {
		return nil
	}
	return err
}

// DeleteAll implements Backend.
func (s *S3) DeleteAll(ctx context.Context, prefix string) error {
	ctx, cancel := context.WithCancel(ctx) // stops the lister if removal fails
	defer cancel()
	objects := make(chan minio.ObjectInfo)
	listErr := make(chan error, 1)
	go func() {
		defer close(objects)
		for obj := range s.c.ListObjects(ctx, s.bucket, minio.ListObjectsOptions{Prefix: s.prefix + prefix, Recursive: true}) {
			if obj.Err != nil {
				listErr <- obj.Err
				return
			}
			select {
			case objects <- obj:
			case <-ctx.Done():
				return
			}
		}
	}()
	for rerr := range s.c.RemoveObjects(ctx, s.bucket, objects, minio.RemoveObjectsOptions{}) {
		if rerr.Err != nil {
			return fmt.Errorf("artifacts: remove %s: %w", rerr.ObjectName, rerr.Err)
		}
	}
	select {
	case err := <-listErr:
		return err
	default:
		return ctx.Err()
	}
}
