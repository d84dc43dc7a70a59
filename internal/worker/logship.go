package worker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strconv"
	"sync"
	"time"
)

// maxLogChunk is the most one POST to the log endpoint carries.
const maxLogChunk = 256 << 10

// maxJournalLine caps one output line echoed to the worker's own log.
const maxJournalLine = 4096

// logSpool receives a job's merged output. Bytes are appended to a file on disk, so
// nothing is lost while the orchestrator is unreachable, and each line is echoed to
// the worker's log (the journal) with the job id. After limit bytes a marker line is
// written and further output only reaches the journal.
type logSpool struct {
	path   string
	limit  int64
	log    *slog.Logger
	notify chan struct{} // poked after each append; capacity 1

	mu      sync.Mutex
	f       *os.File
	size    int64
	full    bool
	closed  bool
	partial []byte // the unterminated tail of the output, for the journal
}

func newLogSpool(path string, limit int64, log *slog.Logger) (*logSpool, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return nil, err
	}
	return &logSpool{path: path, limit: limit, log: log, f: f, notify: make(chan struct{}, 1)}, nil
}

// Write never fails towards the job's pipe: a full disk must not kill training.
func (s *logSpool) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.echo(p)
	if s.closed || s.full {
		return len(p), nil
	}
	chunk := p
	if s.limit > 0 && s.size+int64(len(chunk)) > s.limit {
		chunk = chunk[:s.limit-s.size]
		s.full = true
	}
	n, err := s.f.Write(chunk)
	s.size += int64(n)
	if s.full {
		marker := fmt.Sprintf("\n[simpletuner-workerd: log limit of %d bytes reached; further output is not shipped]\n", s.limit)
		m, _ := s.f.WriteString(marker)
		s.size += int64(m)
	}
	if err != nil && !s.full {
		s.log.Warn("cannot spool job output; it still goes to the journal", "path", s.path, "err", err)
		s.full = true
	}
	select {
	case s.notify <- struct{}{}:
	default:
	}
	return len(p), nil
}

// echo logs complete lines (LF or CR terminated: progress bars redraw with CR).
func (s *logSpool) echo(p []byte) {
	for len(p) > 0 {
		i := bytes.IndexAny(p, "\r\n")
		if i < 0 {
			s.partial = append(s.partial, p...)
			if len(s.partial) >= maxJournalLine {
				s.emit(s.partial)
				s.partial = s.partial[:0]
			}
			return
		}
		s.partial = append(s.partial, p[:i]...)
		s.emit(s.partial)
		s.partial = s.partial[:0]
		p = p[i+1:]
	}
}

func (s *logSpool) emit(line []byte) {
	if len(bytes.TrimSpace(line)) == 0 {
		return
	}
	if len(line) > maxJournalLine {
		line = append(line[:maxJournalLine:maxJournalLine], "…"...)
	}
	s.log.Info(string(line))
}

// Close ends the output: the last partial line is logged and the file closed.
func (s *logSpool) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.emit(s.partial)
	s.partial = nil
	s.closed = true
	select {
	case s.notify <- struct{}{}:
	default:
	}
	return s.f.Close()
}

// state is how many bytes are on disk and whether more may come.
func (s *logSpool) state() (size int64, closed bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.size, s.closed
}

// shipper POSTs a spooled log to the orchestrator in order, each chunk at its byte
// offset. The offset only advances on a 2xx, so after a network error the same
// chunk is sent again: appends are idempotent by offset on the orchestrator.
type shipper struct {
	c        *client
	endpoint string
	attempt  int
	spool    *logSpool
	poll     time.Duration
	retry    *backoff
	log      *slog.Logger

	done  chan struct{}
	mu    sync.Mutex
	acked int64
}

func newShipper(c *client, endpoint string, attempt int, spool *logSpool, poll, retryBase, retryMax time.Duration, log *slog.Logger) *shipper {
	return &shipper{
		c: c, endpoint: endpoint, attempt: attempt, spool: spool, poll: poll,
		retry: newBackoff(retryBase, retryMax), log: log, done: make(chan struct{}),
	}
}

// errStopShipping means the orchestrator will not take this log (stale attempt,
// no log endpoint): retrying cannot help.
var errStopShipping = errors.New("orchestrator refuses the log")

// run ships until the spool is closed and fully acknowledged, the orchestrator
// refuses the log, or ctx ends.
func (sh *shipper) run(ctx context.Context) {
	defer close(sh.done)
	f, err := os.Open(sh.spool.path)
	if err != nil {
		sh.log.Warn("cannot read the job's log spool; logs are not shipped", "err", err)
		return
	}
	defer f.Close()
	tick := time.NewTicker(sh.poll)
	defer tick.Stop()
	buf := make([]byte, maxLogChunk)
	failing := false
	for {
		size, closed := sh.spool.state()
		acked := sh.offset()
		if acked >= size {
			if closed {
				return
			}
			select {
			case <-ctx.Done():
				return
			case <-sh.spool.notify:
			case <-tick.C:
			}
			continue
		}
		n, err := f.ReadAt(buf[:min(int64(len(buf)), size-acked)], acked)
		if n == 0 {
			sh.log.Warn("cannot read the job's log spool; logs are not shipped", "err", err)
			return
		}
		chunk := buf[:n]
		if !closed && n < len(buf) {
			// Prefer whole lines while the job still writes; the rest follows.
			if i := bytes.LastIndexAny(chunk, "\r\n"); i >= 0 {
				chunk = chunk[:i+1]
			}
		}
		err = sh.post(ctx, acked, chunk)
		switch {
		case err == nil:
			if failing {
				sh.log.Info("log shipping resumed", "offset", acked)
				failing = false
			}
			sh.retry.reset()
			sh.mu.Lock()
			sh.acked = acked + int64(len(chunk))
			sh.mu.Unlock()
		case errors.Is(err, errStopShipping):
			sh.log.Warn("the orchestrator does not take this job's log any more; stopped shipping it", "err", err)
			return
		default:
			if !failing {
				sh.log.Warn("log shipping failed; will resume from the acknowledged offset", "offset", acked, "err", err)
				failing = true
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(sh.retry.next()):
			}
		}
	}
}

// offset is how many bytes the orchestrator acknowledged.
func (sh *shipper) offset() int64 {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return sh.acked
}

func (sh *shipper) post(ctx context.Context, offset int64, chunk []byte) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, err := sh.c.request(ctx, http.MethodPost, sh.endpoint, bytes.NewReader(chunk))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "text/plain; charset=utf-8")
	req.Header.Set("X-Attempt", strconv.Itoa(sh.attempt))
	req.Header.Set("X-Log-Offset", strconv.FormatInt(offset, 10))
	resp, err := sh.c.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	switch {
	case resp.StatusCode >= 200 && resp.StatusCode < 300:
		return nil
	case resp.StatusCode == http.StatusConflict, resp.StatusCode == http.StatusNotFound,
		resp.StatusCode == http.StatusGone, resp.StatusCode == http.StatusMethodNotAllowed,
		resp.StatusCode == http.StatusBadRequest, resp.StatusCode == http.StatusUnprocessableEntity,
		resp.StatusCode == http.StatusRequestEntityTooLarge:
		return fmt.Errorf("%w: HTTP %d", errStopShipping, resp.StatusCode)
	default:
		return fmt.Errorf("HTTP %d", resp.StatusCode)
	}
}
