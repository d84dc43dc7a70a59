// Package artifacts stores the files training jobs upload (checkpoints, final
// weights, samples): one tree per job and attempt, on the local disk or in an
// S3-compatible bucket. It owns name validation, size limits, checksums and
// the guarantee that an object appears whole or not at all; the orchestrator
// decides who may upload and serves the HTTP side.
package artifacts

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"strings"
	"time"

	"github.com/minio/minio-go/v7"
)

// Errors of every backend; test with errors.Is.
var (
	ErrNotFound = errors.New("no such artifact")
	// ErrConflict: the name clashes with an existing object or directory
	// ("a" and "a/b" cannot both exist on a filesystem).
	ErrConflict = errors.New("artifact name clashes with an existing one")
	// ErrUnsafePath: a symbolic link or a non-regular file sits where the
	// name leads; the store never follows links out of a job's tree.
	ErrUnsafePath = errors.New("artifact path crosses a symbolic link or special file")
	// ErrUnavailable: the backend could not be reached or failed on its side
	// (the S3 service down, unreachable or answering 5xx); trying again
	// later may work.
	ErrUnavailable = errors.New("the artifact store is unreachable")
)

// unavailable marks an error of the backend that says it could not be
// reached (see ErrUnavailable); others pass as they are.
func unavailable(err error) error {
	if err == nil || errors.Is(err, ErrUnavailable) || errors.Is(err, context.Canceled) {
		return err // a request given up (its client went away) says nothing of the store
	}
	// Network errors by their types: a file error's errno passes for a
	// net.Error too, and a full local disk is not an unreachable store.
	var (
		oe  *net.OpError
		ue  *url.Error
		dns *net.DNSError
	)
	if errors.As(err, &oe) || errors.As(err, &ue) || errors.As(err, &dns) || strings.Contains(err.Error(), "connection refused") ||
		minio.ToErrorResponse(err).StatusCode >= 500 {
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	return err
}

// Backend is where bytes live. Names are slash-separated paths relative to
// the backend's root, built and validated by Store; a backend never sees a
// name with "..", a leading "/" or an empty segment.
type Backend interface {
	// Put reads body to its end and stores it under name. Before the object
	// becomes visible it calls commit (when not nil); if reading body or
	// commit fails, nothing new is left under name and the error is returned.
	Put(ctx context.Context, name string, body io.Reader, commit func() error) error
	// Open returns the object for reading and seeking, with its size and time.
	Open(ctx context.Context, name string) (Reader, Entry, error)
	// Stat describes one object; ErrNotFound when there is none.
	Stat(ctx context.Context, name string) (Entry, error)
	// List returns every object whose name starts with prefix (a directory
	// prefix ending in "/"), in no particular order.
	List(ctx context.Context, prefix string) ([]Entry, error)
	// Delete removes one object; a missing one is not an error.
	Delete(ctx context.Context, name string) error
	// DeleteAll removes every object below prefix (ending in "/").
	DeleteAll(ctx context.Context, prefix string) error
	// String describes the backend for logs ("local /var/lib/…").
	String() string
}

// Reader is an open object.
type Reader interface {
	io.ReadSeekCloser
}

// Entry is an object as a backend sees it.
type Entry struct {
	Name     string
	Size     int64
	Modified time.Time
}
