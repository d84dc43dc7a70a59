package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// client talks to one orchestrator. Streams get a transport of their own
// (one TCP connection each, never pooled); short requests share a pool.
type client struct {
	o       *orch
	api     *http.Client
	streams *http.Client

	// probe, when set, receives every job_submit as it arrives.
	probe atomic.Pointer[chan arrival]
	// done, when set, receives the id of every job a worker completed.
	done atomic.Pointer[chan string]
	// hb collects heartbeat samples while set.
	hbMu   sync.Mutex
	hb     []time.Duration
	hbSlow map[time.Time]int // heartbeats over 100 ms by the second they started
	hbOn   atomic.Bool
	errors atomic.Int64
	// lastLatencies are the samples of the last latency call.
	lastLatencies []time.Duration
}

type arrival struct {
	jobID string
	at    time.Time
}

func newClient(o *orch) *client {
	pool := &http.Transport{MaxIdleConns: 1024, MaxIdleConnsPerHost: 1024, IdleConnTimeout: time.Minute}
	streams := &http.Transport{MaxIdleConnsPerHost: -1, DisableCompression: true}
	return &client{o: o, hbSlow: map[time.Time]int{}, api: &http.Client{Transport: pool, Timeout: 60 * time.Second}, streams: &http.Client{Transport: streams}}
}

// call sends a JSON request and decodes a JSON reply into out (may be nil).
func (c *client) call(ctx context.Context, method, path string, hdr map[string]string, body, out any, want int) error {
	var rd io.Reader
	if body != nil {
		data, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(data)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.o.url+path, rd)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	res, err := c.api.Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	data, err := io.ReadAll(res.Body)
	if err != nil {
		return err
	}
	if res.StatusCode != want {
		return fmt.Errorf("%s %s: HTTP %d: %s", method, path, res.StatusCode, bytes.TrimSpace(data))
	}
	if out != nil {
		return json.Unmarshal(data, out)
	}
	return nil
}

func (c *client) adminHdr() map[string]string {
	return map[string]string{"Authorization": "Bearer " + c.o.admin}
}

// submit queues one zero-work job and returns its id.
func (c *client) submit(ctx context.Context) (string, error) {
	var out struct {
		JobID string `json:"job_id"`
	}
	err := c.call(ctx, "POST", "/api/queue/submit", c.adminHdr(),
		map[string]any{"config": map[string]any{"model_type": "lora"}, "target": "worker"}, &out, 201)
	return out.JobID, err
}

// worker is one simulated protocol-2 worker.
type worker struct {
	c        *client
	id       string
	token    string
	interval time.Duration // heartbeat interval the orchestrator asked for
}

// createWorkers makes n workers through the admin API, par at a time.
func (c *client) createWorkers(ctx context.Context, first, n, par int) ([]*worker, error) {
	out := make([]*worker, n)
	err := parallel(n, par, func(i int) error {
		var r struct {
			WorkerID string `json:"worker_id"`
			Token    string `json:"token"`
		}
		err := c.call(ctx, "POST", "/api/admin/workers", c.adminHdr(), map[string]any{
			"name": fmt.Sprintf("bench-%05d", first+i), "worker_type": "persistent",
			"labels": map[string]string{"gpu_type": "a100"}}, &r, 201)
		out[i] = &worker{c: c, id: r.WorkerID, token: r.Token}
		return err
	})
	return out, err
}

func (w *worker) hdr() map[string]string { return map[string]string{"X-Worker-Token": w.token} }

// register announces the worker as protocol 2 with one fake GPU.
func (w *worker) register(ctx context.Context) error {
	var r struct {
		HeartbeatInterval float64 `json:"heartbeat_interval_seconds"`
	}
	err := w.c.call(ctx, "POST", "/api/workers/register", w.hdr(), map[string]any{
		"name": w.id, "persistent": true, "protocol": 2, "version": "bench",
		"gpu_info": map[string]any{"name": "NVIDIA A100-SXM4-80GB", "vram_gb": 80, "count": 1, "accelerator": "cuda"},
	}, &r, 200)
	w.interval = time.Duration(r.HeartbeatInterval * float64(time.Second))
	return err
}

// connect opens the SSE stream; it returns once the orchestrator has attached
// it (the 200 is written after that) and reads events until ctx ends.
func (w *worker) connect(ctx context.Context) error {
	req, err := http.NewRequestWithContext(ctx, "GET", w.c.o.url+"/api/workers/stream?worker_id="+w.id, nil)
	if err != nil {
		return err
	}
	req.Header.Set("X-Worker-Token", w.token)
	res, err := w.c.streams.Do(req)
	if err != nil {
		return err
	}
	if res.StatusCode != 200 {
		res.Body.Close()
		return fmt.Errorf("stream: HTTP %d", res.StatusCode)
	}
	go w.read(ctx, res.Body)
	return nil
}

// read handles events like workerd does: a job_submit is acknowledged with
// "starting" and, the job doing no work, at once reported "completed".
func (w *worker) read(ctx context.Context, body io.ReadCloser) {
	defer body.Close()
	br := bufio.NewReaderSize(body, 4096)
	for {
		line, err := br.ReadSlice('\n')
		if err != nil {
			return
		}
		data, ok := bytes.CutPrefix(line, []byte("data: "))
		if !ok || !bytes.Contains(data, []byte(`"job_submit"`)) {
			continue
		}
		at := time.Now()
		var ev struct {
			JobID   string `json:"job_id"`
			Attempt int    `json:"attempt"`
		}
		if json.Unmarshal(data, &ev) != nil {
			w.c.errors.Add(1)
			continue
		}
		if p := w.c.probe.Load(); p != nil {
			*p <- arrival{ev.JobID, at}
		}
		w.runJob(ctx, ev.JobID, ev.Attempt)
	}
}

func (w *worker) runJob(ctx context.Context, jobID string, attempt int) {
	for _, st := range []string{"starting", "completed"} {
		if err := w.c.call(ctx, "POST", "/api/workers/job/"+jobID+"/status", w.hdr(),
			map[string]any{"status": st, "attempt": attempt}, nil, 200); err != nil {
			if ctx.Err() == nil {
				w.c.errors.Add(1)
			}
			return
		}
	}
	if d := w.c.done.Load(); d != nil {
		*d <- jobID
	}
}

// heartbeats beats every interval, starting at a random point of the first
// one so the fleet's beats spread evenly, and records each round trip.
func (w *worker) heartbeats(ctx context.Context) {
	iv := w.interval
	if iv <= 0 {
		iv = 30 * time.Second
	}
	t := time.NewTimer(rand.N(iv))
	defer t.Stop()
	body := map[string]any{"worker_id": w.id, "status": "idle"}
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		t.Reset(iv)
		start := time.Now()
		err := w.c.call(ctx, "POST", "/api/workers/heartbeat", w.hdr(), body, nil, 200)
		d := time.Since(start)
		if err != nil {
			if ctx.Err() == nil {
				w.c.errors.Add(1)
			}
			continue
		}
		if w.c.hbOn.Load() {
			w.c.hbMu.Lock()
			w.c.hb = append(w.c.hb, d)
			if d > 100*time.Millisecond {
				w.c.hbSlow[start.Truncate(time.Second)]++
			}
			w.c.hbMu.Unlock()
		}
	}
}

// parallel runs fn(0..n-1) on par goroutines and returns the first error.
func parallel(n, par int, fn func(i int) error) error {
	var next atomic.Int64
	var once sync.Once
	var first error
	var wg sync.WaitGroup
	for range min(par, n) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				if err := fn(i); err != nil {
					once.Do(func() { first = err })
					next.Store(int64(n)) // stop handing out work
					return
				}
			}
		}()
	}
	wg.Wait()
	return first
}
