package worker

import (
	"bytes"
	"fmt"
	"io"
	"sync"
)

// lockedWriter is an io.Writer safe to read while a process writes to it.
type lockedWriter struct {
	mu sync.Mutex
	w  *bytes.Buffer
}

var _ io.Writer = (*lockedWriter)(nil)

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func (l *lockedWriter) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.String()
}

func fmtSscan(s string, v *int) (int, error) { return fmt.Sscan(s, v) }
