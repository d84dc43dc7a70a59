package artifacts

import (
	"context"
	"errors"
	"net"
	"net/url"
	"os"
	"sort"
	"syscall"
	"testing"

	"github.com/minio/minio-go/v7"

	"github.com/simpletuner/simpletuner-orchestration/internal/artifacts/miniotest"
)

func TestMain(m *testing.M) {
	code := m.Run()
	miniotest.Stop()
	os.Exit(code)
}

// forEachBackend runs fn on a fresh store of each backend, as parallel
// subtests: local always, s3 against a real MinIO when one is installed.
// left lists what the backend holds (every name, temporary files and
// unfinished multipart uploads included), sorted.
func forEachBackend(t *testing.T, l Limits, fn func(t *testing.T, s *Store, left func() []string)) {
	t.Helper()
	t.Run("local", func(t *testing.T) {
		t.Parallel()
		s, _ := newLocalStore(t, l)
		fn(t, s, func() []string { return names(t, s.b, nil) })
	})
	t.Run("s3", func(t *testing.T) {
		t.Parallel()
		srv := miniotest.Start(t)
		bucket := srv.Bucket(t)
		b, err := NewS3(t.Context(), S3Config{Endpoint: srv.Endpoint, Bucket: bucket, Prefix: "orch/",
			AccessKey: miniotest.AccessKey, SecretKey: miniotest.SecretKey, PartSize: 5 << 20})
		if err != nil {
			t.Fatal(err)
		}
		fn(t, New(b, l), func() []string {
			return names(t, b, func() []string {
				var out []string
				for range srv.IncompleteUploads(t, bucket) {
					out = append(out, "(unfinished multipart upload)")
				}
				return out
			})
		})
	})
}

func names(t *testing.T, b Backend, extra func() []string) []string {
	t.Helper()
	entries, err := b.List(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		out = append(out, e.Name)
	}
	if extra != nil {
		out = append(out, extra()...)
	}
	sort.Strings(out)
	return out
}

func TestS3RefusesBadConfig(t *testing.T) {
	t.Parallel()
	for _, ep := range []string{"", "minio:9000", "ftp://x", "http://x/path"} {
		if _, err := NewS3(t.Context(), S3Config{Endpoint: ep, Bucket: "b"}); err == nil {
			t.Errorf("endpoint %q accepted", ep)
		}
	}
	srv := miniotest.Start(t)
	_, err := NewS3(t.Context(), S3Config{Endpoint: srv.Endpoint, Bucket: "no-such-bucket", AccessKey: miniotest.AccessKey, SecretKey: miniotest.SecretKey})
	if err == nil {
		t.Fatal("a missing bucket was accepted")
	}
	_, err = NewS3(t.Context(), S3Config{Endpoint: srv.Endpoint, Bucket: srv.Bucket(t), AccessKey: "wrong", SecretKey: "wrong"})
	if err == nil {
		t.Fatal("wrong credentials were accepted")
	}
}

// A backend that cannot be reached (a refused connection, a timeout, the S3
// service answering 5xx) is ErrUnavailable; what it refuses on purpose, and
// local file errors, are not.
func TestUnavailable(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	_, refused := net.Dial("tcp", addr) // a real refused connection
	if refused == nil {
		t.Fatal("a closed port accepted a connection")
	}
	for _, c := range []struct {
		err  error
		want bool
	}{
		{refused, true},
		{&url.Error{Op: "Get", URL: "http://s3/x", Err: refused}, true},
		{minio.ErrorResponse{StatusCode: 503, Code: "SlowDown"}, true},
		{minio.ErrorResponse{StatusCode: 403, Code: "AccessDenied"}, false},
		{ErrNotFound, false},
		{&os.PathError{Op: "write", Path: "/x", Err: syscall.ENOSPC}, false},
	} {
		if got := errors.Is(unavailable(c.err), ErrUnavailable); got != c.want {
			t.Errorf("unavailable(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}
