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
	"syscall"
	"time"
)

// maxLogChunk is the most one POST to the log endpoint carries.
const maxLogChunk = 256 << 10

// maxJournalLine caps one output line echoed to the worker's own log.
const maxJournalLine = 4096

// logSpool receives a job's merged output. Bytes are appended to a file on disk
// (made by the first byte), so
// nothing is lost while the orchestrator is unreachable, and each line is echoed to
// the worker's log (the journal) with the job id. After limit bytes a marker line is
// written and further output only reaches the journal.
//
// A full (or failing) state_dir never stops the job: what the file cannot take
// waits in memory (up to heldMax bytes) and is written, in order, as soon as it
// fits again. The worker logs one warning when that starts and one line when it
// ends; output beyond heldMax is lost, and a marker line in the log says how much.
// Bytes already in the file stay there and are shipped as before.
type logSpool struct {
	path   string
	limit  int64
	log    *slog.Logger
	notify chan struct{} // poked after each append; capacity 1

	mu      sync.Mutex
	f       *os.File
	size    int64 // bytes in the file
	full    bool  // the limit was reached
	closed  bool
	partial []byte // the unterminated tail of the output, for the journal

	held     []byte    // output the disk refused, oldest first
	lost     int64     // output dropped because held was full
	diskFull bool      // writing failed and has not succeeded since
	since    time.Time // when it failed
	lastTry  time.Time
}

// heldMax bounds the output kept in memory while the disk refuses it.
const heldMax = 8 << 20

// retryEvery is how often held output is offered to the disk again.
const retryEvery = 250 * time.Millisecond

func newLogSpool(path string, limit int64, log *slog.Logger) *logSpool {
	return &logSpool{path: path, limit: limit, log: log, notify: make(chan struct{}, 1)}
}

// write appends b to the file, which is created by the first output: a job
// that prints nothing costs no file.
func (s *logSpool) write(b []byte) (int, error) {
	if s.f == nil {
		f, err := os.OpenFile(s.path, os.O_CREATE|os.O_TRUNC|os.O_WRONLY|syscall.O_NOFOLLOW, 0o600)
		if err != nil {
			return 0, err
		}
		s.f = f
	}
	n, err := s.f.Write(b)
	s.size += int64(n)
	return n, err
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
	if used := s.size + int64(len(s.held)) + s.lost; s.limit > 0 && used+int64(len(chunk)) > s.limit {
		chunk = chunk[:max(0, s.limit-used)]
		marker := fmt.Sprintf("\n[simpletuner-workerd: log limit of %d bytes reached; further output is not shipped]\n", s.limit)
		chunk = append(chunk[:len(chunk):len(chunk)], marker...)
		s.full = true
	}
	s.put(chunk)
	select {
	case s.notify <- struct{}{}:
	default:
	}
	return len(p), nil
}

// put appends b after whatever is held; what the disk refuses is held.
func (s *logSpool) put(b []byte) {
	if len(s.held) > 0 || s.lost > 0 {
		s.retry(false)
		if len(s.held) > 0 || s.lost > 0 {
			s.hold(b)
			return
		}
	}
	n, err := s.write(b)
	if err != nil {
		s.refused(err)
		s.hold(b[n:])
	}
}

// hold keeps b in memory, up to heldMax; the rest is counted as lost.
func (s *logSpool) hold(b []byte) {
	room := max(0, heldMax-len(s.held))
	if s.lost > 0 {
		room = 0 // keep the order: nothing after a gap is held before it
	}
	if len(b) > room {
		s.lost += int64(len(b) - room)
		b = b[:room]
	}
	s.held = append(s.held, b...)
}

// refused notes that the disk refused output: one warning per episode.
func (s *logSpool) refused(err error) {
	if s.diskFull {
		return
	}
	s.diskFull, s.since = true, time.Now()
	s.log.Warn("cannot spool job output (state_dir full?); the job keeps running, its output is held in memory and written once there is space, and still goes to the journal",
		"path", s.path, "held_max_bytes", heldMax, "err", err)
}

// retry offers held output to the disk again, at most every retryEvery
// unless force.
func (s *logSpool) retry(force bool) {
	if len(s.held) == 0 && s.lost == 0 {
		return
	}
	if !force && time.Since(s.lastTry) < retryEvery {
		return
	}
	s.lastTry = time.Now()
	if len(s.held) > 0 {
		n, err := s.write(s.held)
		s.held = append([]byte(nil), s.held[n:]...)
		if err != nil {
			return
		}
	}
	if s.lost > 0 {
		marker := fmt.Sprintf("\n[simpletuner-workerd: %d bytes of output lost: state_dir was full]\n", s.lost)
		n, err := s.write([]byte(marker))
		if err != nil {
			s.held = append(s.held, marker[n:]...)
			return
		}
		s.lost = 0
	}
	if s.diskFull {
		s.diskFull = false
		s.log.Info("job output is spooled again", "path", s.path, "after", time.Since(s.since).Round(time.Millisecond).String())
	}
	select {
	case s.notify <- struct{}{}:
	default:
	}
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
	s.retry(true)
	if n := int64(len(s.held)) + s.lost; n > 0 {
		s.log.Warn("job output could not be spooled before the job ended; it is only in the journal", "path", s.path, "bytes", n)
		s.held, s.lost = nil, 0
	}
	s.closed = true
	select {
	case s.notify <- struct{}{}:
	default:
	}
	if s.f == nil {
		return nil
	}
	return s.f.Close()
}

// state is how many bytes are on disk and whether more may come. The
// shipper asks often, so held output gets its next chance here too.
func (s *logSpool) state() (size int64, closed bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.retry(false)
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
	var f *os.File // opened once there is output: the spool makes the file then
	defer func() {
		if f != nil {
			f.Close()
		}
	}()
	tick := time.NewTicker(sh.poll)
	defer tick.Stop()
	var buf []byte // made with the file: a job that prints nothing costs no 256 KiB buffer
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
		if f == nil {
			var err error
			if f, err = os.Open(sh.spool.path); err != nil {
				sh.log.Warn("cannot read the job's log spool; logs are not shipped", "err", err)
				return
			}
			buf = make([]byte, maxLogChunk)
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
	req, err := sh.c.Request(ctx, http.MethodPost, sh.endpoint, bytes.NewReader(chunk))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "text/plain; charset=utf-8")
	req.Header.Set("X-Attempt", strconv.Itoa(sh.attempt))
	req.Header.Set("X-Log-Offset", strconv.FormatInt(offset, 10))
	resp, err := sh.c.Do(req)
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
