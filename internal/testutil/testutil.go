// Package testutil holds the small helpers that the tests of several packages
// share: a buffer safe to read while another goroutine writes to it, and free
// loopback ports.
package testutil

import (
	"bytes"
	"net"
	"sync"
	"testing"
)

// Buffer is a bytes.Buffer guarded by a mutex: a log or a process's output can
// be read while it is being written.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// Len is the number of bytes written so far.
func (b *Buffer) Len() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Len()
}

// FreePort returns a loopback TCP port that was free a moment ago.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// MustFreePort is FreePort for tests: it fails t when no port can be had.
func MustFreePort(t testing.TB) int {
	t.Helper()
	p, err := FreePort()
	if err != nil {
		t.Fatal(err)
	}
	return p
}
