package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sync/atomic"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
)

// Messages posted to the session loop by the connection goroutines. gen tells a
// stale connection's messages from the current one's.
type (
	registered struct {
		gen  int
		url  string // the orchestrator URL it was sent to
		resp protocol.RegisterResponse
		err  error
		// leftOut are the self-fenced attempts the registration did not list.
		leftOut []string
		// sent is when the registration went out: the orchestrator heard
		// from the worker no earlier.
		sent time.Time
	}
	streamOpened struct{ gen int }
	streamEvent  struct {
		gen int
		ev  sseEvent
	}
	streamEnded struct {
		gen   int
		err   error
		upFor time.Duration
	}
)

// errStreamSilent is why a stream that went quiet was closed.
var errStreamSilent = errors.New("no byte on the stream for 3 ping intervals")

// connect flushes waiting terminal reports, then registers. Reports go first: a
// registration that no longer lists a finished job makes the orchestrator treat
// that job as lost, and its real outcome would then arrive too late (409). So a
// report that could not reach the orchestrator at all fails this attempt: the
// orchestrator may come back between the two requests, and the registration
// must not overtake the report. A report answered with an error (5xx) does not
// hold the registration back; it keeps being re-sent.
func (w *Worker) connect(ctx context.Context, gen int) {
	defer w.wg.Done()
	at := w.c.CurrentURL()
	if err := w.out.flush(ctx, true); err != nil && (isAuthError(err) || statusOf(err) == 0) {
		w.post(registered{gen: gen, url: at, err: err})
		return
	}
	body, leftOut := w.registerRequest()
	var resp protocol.RegisterResponse
	sent := time.Now()
	err := w.c.DoJSON(ctx, 3*w.opt.Timers.RequestTimeout, "register", http.MethodPost, "/api/workers/register", body, &resp)
	if err == nil && resp.WorkerID == "" {
		err = errors.New("register: the orchestrator's reply has no worker_id")
	}
	w.post(registered{gen: gen, url: at, resp: resp, err: err, leftOut: leftOut, sent: sent})
}

// registerRequest is the registration body, and the keys of the self-fenced
// attempts it leaves out.
func (w *Worker) registerRequest() (protocol.RegisterRequest, []string) {
	inv, maxJobs := w.slots.inventory()
	running, current, leftOut := w.books.snapshot()
	caps := protocol.Capabilities{Isolation: w.iso.Name(), MaxJobs: maxJobs, OwnType: w.opt.OwnType}
	if js := w.currentJobSettings(); js.OwnCancelGrace {
		caps.CancelGraceSeconds = js.CancelGrace.Seconds()
	}
	persistent := w.link.isPersistent()
	info, _ := json.Marshal(inv.GPUInfo())
	req := protocol.RegisterRequest{
		Name:          w.opt.Name,
		GPUInfo:       info,
		Persistent:    persistent,
		Labels:        w.opt.Labels,
		Protocol:      protocol.Version,
		Version:       w.opt.Version,
		Running:       running,
		Capabilities:  &caps,
		GPUConditions: w.gpus.conditions(),
	}
	if current != "" {
		req.CurrentJobID = &current // protocol-1 orchestrators only know current_job_id
	}
	return req, leftOut
}

// activityReader records when the last byte arrived.
type activityReader struct {
	r    io.Reader
	last *atomic.Int64
}

func (a *activityReader) Read(p []byte) (int, error) {
	n, err := a.r.Read(p)
	if n > 0 {
		a.last.Store(time.Now().UnixNano())
	}
	return n, err
}

// stream holds GET /api/workers/stream open and posts its events. A watchdog
// closes it when no byte (not even a ping) arrived for 3 ping intervals: a peer
// that vanished without a FIN would otherwise leave us waiting forever.
func (w *Worker) stream(ctx context.Context, gen int, workerID string) {
	defer w.wg.Done()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	began := time.Now()
	end := func(err error) {
		w.post(streamEnded{gen: gen, err: err, upFor: time.Since(began)})
	}

	req, err := w.c.Request(ctx, http.MethodGet, "/api/workers/stream?worker_id="+url.QueryEscape(workerID), nil)
	if err != nil {
		end(err)
		return
	}
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Cache-Control", "no-cache")
	headerTimer := time.AfterFunc(w.opt.Timers.RequestTimeout, cancel)
	resp, err := w.c.Do(req)
	headerTimer.Stop()
	if err != nil {
		end(fmt.Errorf("stream: %w", err))
		return
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		end(w.c.Check(resp, "stream", 0))
		return
	}
	w.post(streamOpened{gen: gen})

	var last atomic.Int64
	last.Store(time.Now().UnixNano())
	var silent atomic.Bool
	silence := 3 * w.link.streamPingInterval(w.opt.Timers.PingInterval)
	go func() {
		t := time.NewTicker(max(silence/8, time.Millisecond))
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				if time.Since(time.Unix(0, last.Load())) > silence {
					silent.Store(true)
					cancel()
					return
				}
			}
		}
	}()
	err = readSSE(&activityReader{r: resp.Body, last: &last}, func(ev sseEvent) error {
		w.post(streamEvent{gen: gen, ev: ev})
		return nil
	})
	if silent.Load() {
		err = errStreamSilent
	} else if errors.Is(err, io.EOF) {
		err = errors.New("the orchestrator closed the stream")
	}
	end(err)
}
