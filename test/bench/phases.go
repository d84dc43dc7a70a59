package main

import (
	"context"
	"fmt"
	"sort"
	"sync/atomic"
	"time"
)

// latency submits one job at a time while every worker idles and measures
// from just before POST /api/queue/submit until the job_submit event is read
// by a worker. The next job waits until the previous one completed.
func (c *client) latency(ctx context.Context, samples int, budget time.Duration) (dist, error) {
	probe := make(chan arrival, 1)
	done := make(chan string, 1)
	c.probe.Store(&probe)
	c.done.Store(&done)
	defer c.probe.Store(nil)
	defer c.done.Store(nil)
	var out []time.Duration
	stop := time.Now().Add(budget)
	for i := 0; i < samples && time.Now().Before(stop); i++ {
		start := time.Now()
		id, err := c.submit(ctx)
		if err != nil {
			return dist{}, err
		}
		select {
		case a := <-probe:
			if a.jobID != id {
				return dist{}, fmt.Errorf("expected job %s, a worker got %s", id, a.jobID)
			}
			out = append(out, a.at.Sub(start))
		case <-time.After(30 * time.Second):
			return dist{}, fmt.Errorf("job %s not dispatched within 30s", id)
		}
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			return dist{}, fmt.Errorf("job %s not completed within 30s", id)
		}
	}
	c.lastLatencies = out
	return summarize(out), nil
}

// cycles runs that many zero-work jobs through submit → dispatch → starting →
// completed with submitters concurrent submitters and at most backlog jobs
// unfinished, and returns jobs per second.
func (c *client) cycles(ctx context.Context, jobs, submitters, backlog int) (float64, time.Duration, error) {
	done := make(chan string, jobs)
	c.done.Store(&done)
	defer c.done.Store(nil)
	slots := make(chan struct{}, backlog)
	var submitted atomic.Int64
	errc := make(chan error, submitters)
	start := time.Now()
	for range submitters {
		go func() {
			for submitted.Add(1) <= int64(jobs) {
				slots <- struct{}{}
				if _, err := c.submit(ctx); err != nil {
					errc <- err
					return
				}
			}
		}()
	}
	timeout := time.After(5 * time.Minute)
	for n := 0; n < jobs; n++ {
		select {
		case <-done:
			<-slots
		case err := <-errc:
			return 0, 0, err
		case <-timeout:
			return 0, 0, fmt.Errorf("only %d of %d jobs completed within 5 minutes", n, jobs)
		}
	}
	elapsed := time.Since(start)
	return float64(jobs) / elapsed.Seconds(), elapsed, nil
}

// dist is a latency distribution.
type dist struct {
	n                  int
	p50, p90, p99, max time.Duration
}

func summarize(d []time.Duration) dist {
	if len(d) == 0 {
		return dist{}
	}
	sort.Slice(d, func(a, b int) bool { return d[a] < d[b] })
	q := func(p float64) time.Duration { return d[min(len(d)-1, int(p*float64(len(d))))] }
	return dist{n: len(d), p50: q(.50), p90: q(.90), p99: q(.99), max: d[len(d)-1]}
}

func (d dist) String() string {
	if d.n == 0 {
		return "no samples"
	}
	return fmt.Sprintf("%s / %s / %s / %s (n=%d)", ms(d.p50), ms(d.p90), ms(d.p99), ms(d.max), d.n)
}

// short is p50 / p90 / p99 alone.
func (d dist) short() string {
	if d.n == 0 {
		return "no samples"
	}
	return fmt.Sprintf("%s / %s / %s", ms(d.p50), ms(d.p90), ms(d.p99))
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond)) }
