package e2etest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// SimWorker is an in-process protocol-2 worker: it registers, holds the SSE
// stream open and heartbeats, and never runs anything. Many of them stand in
// for a fleet reconnecting at once.
type SimWorker struct {
	ID, Token, Name string
	BaseURL         string
	Client          *http.Client

	mu      sync.Mutex
	cancel  context.CancelFunc
	done    chan struct{}
	open    atomic.Bool
	Events  atomic.Int64
	Submits atomic.Int64
}

// SimTransport is a transport for many simulated workers on one host.
func SimTransport() *http.Transport {
	return &http.Transport{
		DialContext:         (&net.Dialer{Timeout: 10 * time.Second}).DialContext,
		MaxIdleConns:        4096,
		MaxIdleConnsPerHost: 4096,
		IdleConnTimeout:     30 * time.Second,
	}
}

func (w *SimWorker) post(ctx context.Context, path string, body any) (int, []byte, error) {
	b, _ := json.Marshal(body)
	req, _ := http.NewRequestWithContext(ctx, "POST", w.BaseURL+path, bytes.NewReader(b))
	req.Header.Set("X-Worker-Token", w.Token)
	req.Header.Set("Content-Type", "application/json")
	res, err := w.Client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer res.Body.Close()
	out, _ := io.ReadAll(res.Body)
	return res.StatusCode, out, nil
}

// Register sends a protocol-2 registration with nothing running.
func (w *SimWorker) Register(ctx context.Context) error {
	st, body, err := w.post(ctx, "/api/workers/register", map[string]any{
		"name": w.Name, "gpu_info": map[string]any{}, "persistent": true, "protocol": 2, "version": "sim"})
	if err != nil {
		return err
	}
	if st != 200 {
		return fmt.Errorf("register %s: %d %s", w.Name, st, body)
	}
	return nil
}

// Heartbeat sends one idle heartbeat.
func (w *SimWorker) Heartbeat(ctx context.Context) error {
	st, body, err := w.post(ctx, "/api/workers/heartbeat", map[string]any{"worker_id": w.ID, "status": "idle"})
	if err != nil {
		return err
	}
	if st != 200 {
		return fmt.Errorf("heartbeat %s: %d %s", w.Name, st, body)
	}
	return nil
}

// Disconnect says goodbye.
func (w *SimWorker) Disconnect(ctx context.Context) error {
	_, _, err := w.post(ctx, "/api/workers/disconnect", map[string]any{"worker_id": w.ID})
	return err
}

// Open opens the event stream and reads it in the background until Close or
// until the server ends it. It returns once the response headers arrived.
func (w *SimWorker) Open(ctx context.Context) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	sctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(sctx, "GET", w.BaseURL+"/api/workers/stream?worker_id="+w.ID, nil)
	req.Header.Set("X-Worker-Token", w.Token)
	type result struct {
		res *http.Response
		err error
	}
	ch := make(chan result, 1)
	go func() { res, err := w.Client.Do(req); ch <- result{res, err} }()
	var r result
	select {
	case r = <-ch:
	case <-ctx.Done():
		cancel()
		r = <-ch
		if r.err == nil {
			r.res.Body.Close()
		}
		return ctx.Err()
	}
	if r.err != nil {
		cancel()
		return r.err
	}
	if r.res.StatusCode != 200 {
		r.res.Body.Close()
		cancel()
		return fmt.Errorf("stream %s: %d", w.Name, r.res.StatusCode)
	}
	w.cancel, w.done = cancel, make(chan struct{})
	w.open.Store(true)
	go func(body io.ReadCloser, done chan struct{}) {
		defer close(done)
		defer body.Close()
		defer w.open.Store(false)
		sc := bufio.NewScanner(body)
		for sc.Scan() {
			line := sc.Text()
			if len(line) > 6 && line[:6] == "data: " {
				w.Events.Add(1)
				if bytes.Contains([]byte(line), []byte(`"job_submit"`)) {
					w.Submits.Add(1)
				}
			}
		}
	}(r.res.Body, w.done)
	return nil
}

// StreamOpen reports whether the stream is still being read.
func (w *SimWorker) StreamOpen() bool { return w.open.Load() }

// Close ends the stream and waits for its reader.
func (w *SimWorker) Close() {
	w.mu.Lock()
	cancel, done := w.cancel, w.done
	w.cancel, w.done = nil, nil
	w.mu.Unlock()
	if cancel != nil {
		cancel()
		<-done
	}
}

// Connect registers and opens the stream, retrying until ctx ends.
func (w *SimWorker) Connect(ctx context.Context) error {
	var last error
	for ctx.Err() == nil {
		if last = w.Register(ctx); last == nil {
			if last = w.Open(ctx); last == nil {
				return nil
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
	return fmt.Errorf("%s never connected: %v", w.Name, last)
}

// SimClient is an HTTP client for one simulated worker: no overall timeout,
// for its stream lives as long as it is open.
func SimClient() *http.Client { return &http.Client{Transport: SimTransport()} }
