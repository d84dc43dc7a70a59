package adminapi

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/julienschmidt/httprouter"

	"github.com/simpletuner/simpletuner-orchestration/internal/auth"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator/logfeed"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator/web"
	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
	"github.com/simpletuner/simpletuner-orchestration/internal/store"
)

const logReadBytes = 1 << 20

// defaultFollowFallback is how often a follower looks at the store
// unprompted: for appends and moves made on another instance, which this one
// hears nothing of.
const defaultFollowFallback = 2 * time.Second

// readLogs returns a job's log as text, or with ?follow=1 streams it as SSE
// ("log" events, one data line per log line) until the job ends.
func (a *API) readLogs(w http.ResponseWriter, r *http.Request, ps httprouter.Params, p auth.Principal) error {
	follow := r.URL.Query().Get("follow")
	if follow == "1" || follow == "true" {
		j, err := a.jobFor(r.Context(), a.CallerOf(r, p), ps.ByName("job_id"), auth.ScopeQueueView)
		if err != nil {
			return err
		}
		return a.followLog(w, r, j, p)
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	out := &countingWriter{w: w}
	err := a.WriteJobLog(WithCaller(r.Context(), a.CallerOf(r, p)), ps.ByName("job_id"), out)
	if out.n > 0 {
		return nil // the client went away, or the store failed midway: the reply stays cut short
	}
	return err
}

// countingWriter counts what went through it.
type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(b []byte) (int, error) {
	n, err := c.w.Write(b)
	c.n += int64(n)
	return n, err
}

// WriteJobLog writes the job's stored log, every attempt's in order, to w.
func (a *API) WriteJobLog(ctx context.Context, id string, w io.Writer) error {
	c, err := authorize(ctx, auth.ScopeQueueView)
	if err != nil {
		return err
	}
	j, err := a.jobFor(ctx, c, id, auth.ScopeQueueView)
	if err != nil {
		return err
	}
	cursor := store.LogCursor{}
	for {
		chunks, err := a.store.ReadLog(ctx, j.ID, cursor, logReadBytes)
		if err != nil || len(chunks) == 0 {
			return err
		}
		for _, c := range chunks {
			if _, err := w.Write(c.Data); err != nil {
				return err
			}
			cursor = store.LogCursor{Attempt: c.Attempt, Offset: c.Offset + int64(len(c.Data))}
		}
	}
}

// followers counts the open follow streams of each credential.
type followers struct {
	mu sync.Mutex
	n  map[string]int
}

func (f *followers) acquire(key string, limit int) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.n == nil {
		f.n = map[string]int{}
	}
	if f.n[key] >= limit {
		return false
	}
	f.n[key]++
	return true
}

func (f *followers) release(key string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.n[key]--; f.n[key] <= 0 {
		delete(f.n, key)
	}
}

// logStream is one follower's connection: where it is in the log and how to
// write to it.
type logStream struct {
	a      *API
	w      http.ResponseWriter
	rc     *http.ResponseController
	jobID  string
	cursor store.LogCursor
	enc    logEncoder
	buf    bytes.Buffer
}

// write sends what is buffered within the write timeout: a client that stops
// reading must not hold the handler forever.
func (ls *logStream) write() bool {
	if ls.buf.Len() == 0 {
		return true
	}
	_ = ls.rc.SetWriteDeadline(time.Now().Add(ls.a.options().StreamWriteTimeout))
	_, err := ls.w.Write(ls.buf.Bytes())
	ls.buf.Reset()
	return err == nil && ls.rc.Flush() == nil
}

// piece writes what p adds after the cursor. It returns false when p does
// not continue the cursor exactly (a gap, a new attempt, a resend): the store
// then has to say what comes next.
func (ls *logStream) piece(p logfeed.Piece) bool {
	end := p.Offset + int64(len(p.Data))
	switch {
	case p.Attempt < ls.cursor.Attempt, p.Attempt == ls.cursor.Attempt && end <= ls.cursor.Offset:
		return true // seen already
	case p.Attempt != ls.cursor.Attempt || p.Offset != ls.cursor.Offset:
		return false
	}
	ls.cursor.Offset = end
	ls.enc.event(&ls.buf, cursorID(ls.cursor), p.Data)
	return ls.write()
}

// catchUp writes everything the store holds after the cursor.
func (ls *logStream) catchUp(ctx context.Context) bool {
	for {
		chunks, err := ls.a.store.ReadLog(ctx, ls.jobID, ls.cursor, logReadBytes)
		if err != nil {
			return false
		}
		if len(chunks) == 0 {
			return true
		}
		for _, c := range chunks {
			ls.cursor = store.LogCursor{Attempt: c.Attempt, Offset: c.Offset + int64(len(c.Data))}
			ls.enc.event(&ls.buf, cursorID(ls.cursor), c.Data)
			if !ls.write() {
				return false
			}
		}
	}
}

// followLog streams the job's log until the job ends, the client goes, the
// credential stops being valid or the orchestrator shuts down. A client that
// reconnects with Last-Event-ID resumes where it was.
func (a *API) followLog(w http.ResponseWriter, r *http.Request, j store.Job, p auth.Principal) error {
	opt := a.options()
	key := p.Actor()
	if !a.followers.acquire(key, opt.MaxLogFollowers) {
		return web.Errorf(http.StatusTooManyRequests, protocol.CodeRateLimited,
			"this credential already follows %d logs, the most server.max_log_followers allows; close one first", opt.MaxLogFollowers)
	}
	defer a.followers.release(key)
	sub := a.logFeed.Subscribe(j.ID)
	defer a.logFeed.Unsubscribe(j.ID, sub)

	rc := http.NewResponseController(w)
	ls := &logStream{a: a, w: w, rc: rc, jobID: j.ID}
	if c, ok := parseCursorID(r.Header.Get("Last-Event-ID")); ok {
		ls.cursor = c
	}
	w.Header().Set("Content-Type", "text/event-stream; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Accel-Buffering", "no")
	_ = rc.SetWriteDeadline(time.Now().Add(opt.StreamWriteTimeout))
	w.WriteHeader(http.StatusOK)

	ctx := r.Context()
	recheck := time.NewTicker(opt.RecheckInterval)
	defer recheck.Stop()
	fallback := time.NewTicker(cmp.Or(opt.FollowFallback, defaultFollowFallback))
	defer fallback.Stop()
	look := true // read the job's state, then catch up from the store
	for {
		if look {
			// The state before the log: once the job is terminal, the read
			// that follows has all the worker shipped before its report.
			cur, err := a.jobFor(ctx, a.CallerOf(r, p), j.ID, auth.ScopeQueueView)
			if err != nil || !ls.catchUp(ctx) {
				return nil
			}
			if cur.Status.Terminal() {
				fmt.Fprintf(&ls.buf, "event: end\ndata: {\"job_id\":%q,\"status\":%q}\n\n", cur.ID, cur.Status)
				ls.write()
				return nil
			}
			look = false
		}
		// A shutting-down orchestrator ends follow streams itself: the HTTP
		// server's graceful stop would otherwise wait for each job to end,
		// and clients reconnect to the next instance anyway.
		if a.stopping() {
			return nil
		}
		_ = rc.SetWriteDeadline(time.Now().Add(opt.StreamWriteTimeout))
		if rc.Flush() != nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-a.stopped:
			return nil
		case <-sub.Wake():
			pieces, catchUp, moved := sub.Take()
			for _, p := range pieces {
				if catchUp {
					break
				}
				catchUp = !ls.piece(p)
			}
			if catchUp && !ls.catchUp(ctx) {
				return nil
			}
			look = moved
		case <-fallback.C:
			look = true
		case <-recheck.C:
			now, ok, err := a.auth.StillAllowed(ctx, r, p, auth.ScopeQueueView)
			if err != nil {
				// The store cannot say; it cannot serve the log either.
				a.log.Debug("log follow: could not re-check the credential", "job_id", j.ID, "err", err)
				continue
			}
			// A person may have left the job's team while keeping
			// queue.view through another team's role.
			if !ok || !a.sees(a.CallerOf(r, now), j.Team) {
				a.log.Info("log follow ended: the credential is no longer valid", "job_id", j.ID, "by", key)
				fmt.Fprintf(&ls.buf, "event: error\ndata: {\"error\":%q,\"detail\":%q}\n\n", protocol.CodeUnauthorized,
					"the credential that opened this stream was revoked or lost its rights")
				ls.write()
				return nil
			}
			p = now
		}
		opt = a.options()
	}
}

// count is how many follow streams are open (Following).
func (f *followers) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, c := range f.n {
		n += c
	}
	return n
}

// Following is how many log-follow streams are open.
func (a *API) Following() int { return a.followers.count() }
