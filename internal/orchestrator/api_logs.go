package orchestrator

import (
	"bytes"
	"fmt"
	"net/http"
	"time"

	"github.com/julienschmidt/httprouter"

	"github.com/simpletuner/simpletuner-orchestration/internal/auth"
	"github.com/simpletuner/simpletuner-orchestration/internal/store"
)

const logReadBytes = 1 << 20

// readLogs returns a job's log as text, or with ?follow=1 streams it as SSE
// ("log" events, one data line per log line) until the job ends.
func (s *Server) readLogs(w http.ResponseWriter, r *http.Request, ps httprouter.Params, _ auth.Principal) error {
	j, err := s.loadJob(r, ps.ByName("job_id"))
	if err != nil {
		return err
	}
	ctx := r.Context()
	follow := r.URL.Query().Get("follow")
	if follow != "1" && follow != "true" {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		cursor := store.LogCursor{}
		for {
			chunks, err := s.store.ReadLog(ctx, j.ID, cursor, logReadBytes)
			if err != nil {
				return err
			}
			if len(chunks) == 0 {
				return nil
			}
			for _, c := range chunks {
				if _, err := w.Write(c.Data); err != nil {
					return nil
				}
				cursor = store.LogCursor{Attempt: c.Attempt, Offset: c.Offset + int64(len(c.Data))}
			}
		}
	}

	rc := http.NewResponseController(w)
	_ = rc.SetWriteDeadline(time.Time{})
	w.Header().Set("Content-Type", "text/event-stream; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	cursor := store.LogCursor{}
	poll := time.NewTicker(250 * time.Millisecond)
	defer poll.Stop()
	for {
		// Read the job's state before the log, so that once it is terminal the
		// read that follows has everything the worker shipped before its report.
		cur, err := s.store.GetJob(ctx, j.ID)
		if err != nil {
			return nil
		}
		for {
			chunks, err := s.store.ReadLog(ctx, j.ID, cursor, logReadBytes)
			if err != nil || len(chunks) == 0 {
				break
			}
			for _, c := range chunks {
				var buf bytes.Buffer
				buf.WriteString("event: log\n")
				for _, line := range bytes.Split(bytes.TrimSuffix(c.Data, []byte("\n")), []byte("\n")) {
					buf.WriteString("data: ")
					buf.Write(bytes.TrimSuffix(line, []byte("\r")))
					buf.WriteByte('\n')
				}
				buf.WriteByte('\n')
				if _, err := w.Write(buf.Bytes()); err != nil {
					return nil
				}
				cursor = store.LogCursor{Attempt: c.Attempt, Offset: c.Offset + int64(len(c.Data))}
			}
		}
		if cur.Status.Terminal() {
			fmt.Fprintf(w, "event: end\ndata: {\"job_id\":%q,\"status\":%q}\n\n", cur.ID, cur.Status)
			_ = rc.Flush()
			return nil
		}
		// A shutting-down orchestrator ends follow streams itself: the HTTP
		// server's graceful stop would otherwise wait for each job to end,
		// and clients reconnect to the next instance anyway.
		if rc.Flush() != nil || s.stopping.Load() {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-poll.C:
		}
	}
}
