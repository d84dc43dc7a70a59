package main

import (
	"context"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"sync/atomic"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/pgtest"
)

// The webhook scenario: does a webhook receiver that answers slowly move
// dispatch? The same orchestrator and workers measure submit → job_submit
// latency and job cycles four times: with no subscription, with a
// subscription to every event whose receiver answers at once, with one
// whose receiver answers each request only after -webhook-delay (30 s), so
// that every request slot of the delivery is held for the whole window and
// the events pile up in the outbox, and with no subscription again (the
// machine's load moves between phases: the two controls bracket it).

type webhookFlags struct {
	run, only bool
	delay     time.Duration
	window    time.Duration
	jobs      int
}

type webhookPhase struct {
	name     string
	latency  dist
	cyclesPS float64
	// What the receiver saw during the phase: requests that arrived and
	// the most under way at once; pending is the outbox's backlog at its end.
	requests, maxInFlight int64
	pending               string
}

type webhookResult struct {
	store       string
	phases      []webhookPhase
	load, load2 string
}

// slowReceiver answers every request after delay (0: at once).
type slowReceiver struct {
	url                          string
	delay                        atomic.Int64
	requests, inFlight, maxInFly atomic.Int64
	srv                          *http.Server
}

func startReceiver() (*slowReceiver, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	r := &slowReceiver{url: "http://" + l.Addr().String() + "/hook"}
	r.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		_, _ = io.Copy(io.Discard, req.Body)
		r.requests.Add(1)
		n := r.inFlight.Add(1)
		defer r.inFlight.Add(-1)
		for m := r.maxInFly.Load(); n > m && !r.maxInFly.CompareAndSwap(m, n); m = r.maxInFly.Load() {
		}
		if d := time.Duration(r.delay.Load()); d > 0 {
			select {
			case <-time.After(d):
			case <-req.Context().Done():
				return
			}
		}
		w.WriteHeader(http.StatusNoContent)
	})}
	go func() { _ = r.srv.Serve(l) }()
	return r, nil
}

// reset starts a phase's counts.
func (r *slowReceiver) reset() { r.requests.Store(0); r.maxInFly.Store(r.inFlight.Load()) }

func runWebhooks(f flags, name, bin, tmp string) (res webhookResult, err error) {
	res.store = name
	dir, err := os.MkdirTemp(tmp, "webhooks-"+name+"-")
	if err != nil {
		return res, err
	}
	dbURL := ""
	if name == "postgres" {
		u, stop, err := pgtest.StartCluster()
		if err != nil {
			return res, err
		}
		defer stop()
		dbURL = u
	}
	res.load = loadAvg()
	defer func() { res.load2 = loadAvg() }()
	// The requests may take the receiver's whole delay: the timeout is
	// above it, so each holds its slot for all of it.
	extra := fmt.Sprintf("\n[webhook_delivery]\nallow_local = true\ntimeout = %q\n", (f.webhooks.delay + 30*time.Second).String())
	o, err := startOrchWith(bin, dir, dbURL, f.inProcess, extra)
	if err != nil {
		return res, err
	}
	defer o.stop()
	c := newClient(o)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ws, err := c.createWorkers(ctx, 0, f.cycleWorkers, f.createPar)
	if err != nil {
		return res, err
	}
	if err := connectAll(ctx, ws, f.connectPar); err != nil {
		return res, err
	}
	rc, err := startReceiver()
	if err != nil {
		return res, err
	}
	defer rc.srv.Close()

	phase := func(label string) error {
		rc.reset()
		p := webhookPhase{name: label}
		var err error
		if p.latency, err = c.latency(ctx, 1<<30, f.webhooks.window); err != nil {
			return err
		}
		if p.cyclesPS, _, err = c.cycles(ctx, f.webhooks.jobs, f.submitters, f.backlog); err != nil {
			return err
		}
		p.requests, p.maxInFlight = rc.requests.Load(), rc.maxInFly.Load()
		var hooks struct {
			Webhooks []struct {
				Pending int `json:"pending"`
			} `json:"webhooks"`
		}
		p.pending = "-"
		if err := c.call(ctx, "GET", "/api/admin/webhooks", c.adminHdr(), nil, &hooks, 200); err == nil && len(hooks.Webhooks) > 0 {
			p.pending = fmt.Sprint(hooks.Webhooks[0].Pending)
		}
		log.Printf("%s webhooks, %s: submit→job_submit %s; %.0f job cycles/s; receiver: %d requests, %d at once; %s pending",
			name, label, p.latency, p.cyclesPS, p.requests, p.maxInFlight, p.pending)
		res.phases = append(res.phases, p)
		return nil
	}
	if err := phase("no subscription"); err != nil {
		return res, err
	}
	if err := c.call(ctx, "POST", "/api/admin/webhooks", c.adminHdr(), map[string]any{"name": "bench", "url": rc.url,
		"events": []string{"*"}}, nil, 201); err != nil {
		return res, err
	}
	if err := phase("receiver answers at once"); err != nil {
		return res, err
	}
	rc.delay.Store(int64(f.webhooks.delay))
	if err := phase(fmt.Sprintf("receiver answers after %s", f.webhooks.delay)); err != nil {
		return res, err
	}
	// The control again, the machine's load having moved meanwhile: the
	// subscription (and its backlog) deleted, the slow requests cut.
	if err := c.call(ctx, "DELETE", "/api/admin/webhooks/bench", c.adminHdr(), nil, nil, 200); err != nil {
		return res, err
	}
	rc.srv.Close()
	if err := phase("no subscription (again)"); err != nil {
		return res, err
	}
	return res, nil
}

func printWebhooks(f flags, rs []webhookResult) {
	if len(rs) == 0 {
		return
	}
	fmt.Printf("\nWebhooks: submit → job_submit latency (p50 / p90 / p99 / max) for %s with %d idle workers, then %d job cycles;\n"+
		"the subscription takes every event (3 a job), the delivery has 8 request slots (webhook_delivery.concurrency)\n\n",
		f.webhooks.window, f.cycleWorkers, f.webhooks.jobs)
	fmt.Println("| store | receiver | submit → job_submit | job cycles/s | requests | at once | pending after |")
	fmt.Println("|---|---|---|---|---|---|---|")
	for _, r := range rs {
		for _, p := range r.phases {
			fmt.Printf("| %s | %s | %s | %.0f | %d | %d | %s |\n", r.store, p.name, p.latency, p.cyclesPS, p.requests, p.maxInFlight, p.pending)
		}
	}
	for _, r := range rs {
		fmt.Printf("\n%s: load average %s before, %s after\n", r.store, r.load, r.load2)
	}
}
