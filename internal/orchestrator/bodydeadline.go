package orchestrator

import (
	"errors"
	"io"
	"net/http"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/config"
)

// BodyDeadline wraps a listener's handler so that a request body cannot hold
// its connection open without making progress: it must arrive within
// server.body_timeout, or move on by config.BodyProgressBytes within each
// such period (a large upload at any useful speed goes on for as long as it
// takes). The deadline covers the body only: once it has been read to its
// end it is lifted, so a long answer (an event stream, a slow download) is
// never cut by it. A body the handler leaves unread (a refused credential)
// is bounded too, while the server reads what is left of it to reuse the
// connection.
func (s *Server) BodyDeadline(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body == nil || r.Body == http.NoBody {
			next.ServeHTTP(w, r)
			return
		}
		b := &deadlineBody{ReadCloser: r.Body, rc: http.NewResponseController(w), timeout: s.options().BodyTimeout}
		if b.extend() != nil { // not a connection of ours (in-process calls)
			next.ServeHTTP(w, r)
			return
		}
		r.Body = b
		next.ServeHTTP(w, r)
	})
}

// deadlineBody moves the connection's read deadline as its body arrives.
type deadlineBody struct {
	io.ReadCloser
	rc      *http.ResponseController
	timeout time.Duration
	since   int64 // bytes read since the deadline last moved
}

func (b *deadlineBody) extend() error {
	b.since = 0
	return b.rc.SetReadDeadline(time.Now().Add(b.timeout))
}

func (b *deadlineBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.since += int64(n)
	switch {
	case errors.Is(err, io.EOF):
		_ = b.rc.SetReadDeadline(time.Time{})
	case b.since >= config.BodyProgressBytes:
		_ = b.extend()
	}
	return n, err
}
