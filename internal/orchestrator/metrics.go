package orchestrator

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
	"github.com/simpletuner/simpletuner-orchestration/internal/store"
	"github.com/simpletuner/simpletuner-orchestration/internal/version"
)

// Metrics are the orchestrator's counters, written in the Prometheus text
// format by MetricsHandler. Gauges that live in the store are read at scrape.
type Metrics struct {
	Heartbeats      atomic.Int64
	StaleRejections atomic.Int64
	AuthFailures    atomic.Int64
	Dispatches      atomic.Int64
	Requeues        atomic.Int64
	Preemptions     atomic.Int64
	dispatchLatency histogram
	artifacts       artifactMetrics
	gpuSeconds      gpuSecondsByWorker
}

// gpuSecondsByWorker sums the GPU-seconds of the attempts whose end this
// instance recorded, per worker.
type gpuSecondsByWorker struct {
	mu sync.Mutex
	m  map[string]float64
}

func (g *gpuSecondsByWorker) add(workerID string, seconds float64) {
	if seconds <= 0 {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.m == nil {
		g.m = map[string]float64{}
	}
	g.m[workerID] += seconds
}

func (g *gpuSecondsByWorker) get(workerID string) (float64, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	v, ok := g.m[workerID]
	return v, ok
}

// NewMetrics returns zeroed metrics.
func NewMetrics() *Metrics {
	return &Metrics{dispatchLatency: newHistogram([]float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60})}
}

// ObserveDispatch records the time from a job's submission (or requeue) to its
// job_submit event being queued on a stream.
func (m *Metrics) ObserveDispatch(d time.Duration) { m.dispatchLatency.observe(d.Seconds()) }

type histogram struct {
	mu      sync.Mutex
	bounds  []float64
	counts  []uint64
	sum     float64
	samples uint64
}

func newHistogram(bounds []float64) histogram {
	return histogram{bounds: bounds, counts: make([]uint64, len(bounds))}
}

func (h *histogram) observe(v float64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for i, b := range h.bounds {
		if v <= b {
			h.counts[i]++
		}
	}
	h.sum += v
	h.samples++
}

func (h *histogram) write(w io.Writer, name, help string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name)
	for i, b := range h.bounds {
		fmt.Fprintf(w, "%s_bucket{le=\"%g\"} %d\n", name, b, h.counts[i])
	}
	fmt.Fprintf(w, "%s_bucket{le=\"+Inf\"} %d\n%s_sum %g\n%s_count %d\n", name, h.samples, name, h.sum, name, h.samples)
}

// Metrics exposes the live counters (tests and benchmarks read them).
func (s *Server) Metrics() *Metrics { return s.metrics }

// MetricsHandler serves /metrics.
func (s *Server) MetricsHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/metrics" {
			http.NotFound(w, r)
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
		defer cancel()
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		s.writeMetrics(ctx, w)
	})
}

func (s *Server) writeMetrics(ctx context.Context, w io.Writer) {
	m := s.metrics
	counter := func(name, help string, v int64) {
		fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s counter\n%s %d\n", name, help, name, name, v)
	}
	gauge := func(name, help string, v int64) {
		fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s gauge\n%s %d\n", name, help, name, name, v)
	}
	fmt.Fprintf(w, "# HELP simpletuner_build_info The version this orchestrator runs and the kind of its store.\n# TYPE simpletuner_build_info gauge\n")
	fmt.Fprintf(w, "simpletuner_build_info{version=%q,store=%q} 1\n", version.Version, s.store.Kind())
	if counts, err := s.store.CountJobs(ctx); err == nil {
		gauge("simpletuner_queue_depth", "Jobs waiting for a worker.", int64(counts[protocol.JobQueued]))
		fmt.Fprintf(w, "# HELP simpletuner_jobs Jobs by status.\n# TYPE simpletuner_jobs gauge\n")
		for _, st := range sortedStatuses(counts) {
			fmt.Fprintf(w, "simpletuner_jobs{status=%q} %d\n", st, counts[protocol.JobStatus(st)])
		}
	}
	byStatus := map[protocol.WorkerStatus]int{}
	var workers []store.Worker
	if err := store.EachWorker(ctx, s.store, func(wk store.Worker) {
		status, _ := s.shown(wk)
		byStatus[status]++
		workers = append(workers, wk)
	}); err == nil {
		fmt.Fprintf(w, "# HELP simpletuner_workers Workers by status.\n# TYPE simpletuner_workers gauge\n")
		for _, st := range []protocol.WorkerStatus{protocol.WorkerConnecting, protocol.WorkerIdle, protocol.WorkerPartial, protocol.WorkerBusy, protocol.WorkerDraining, protocol.WorkerDisconnected, protocol.WorkerOffline} {
			fmt.Fprintf(w, "simpletuner_workers{status=%q} %d\n", st, byStatus[st])
		}
		s.writeGPUMetrics(w, workers)
	}
	gauge("simpletuner_sse_connections", "Worker event streams open on this instance.", int64(s.hub.Count()))
	counter("simpletuner_heartbeats_total", "Heartbeats received.", m.Heartbeats.Load())
	counter("simpletuner_dispatches_total", "job_submit events sent.", m.Dispatches.Load())
	counter("simpletuner_requeues_total", "Attempts that ended with the job back in the queue.", m.Requeues.Load())
	counter("simpletuner_preemptions_total", "Running jobs this instance preempted for another team's job (or one of higher priority).", m.Preemptions.Load())
	counter("simpletuner_stale_attempt_rejections_total", "Reports refused because they came from a stale attempt.", m.StaleRejections.Load())
	counter("simpletuner_auth_failures_total", "Requests refused for a missing, unknown or rate-limited credential.", m.AuthFailures.Load())
	counter("simpletuner_sse_slow_streams_dropped_total", "Worker streams closed because their reader fell behind.", s.hub.Dropped())
	m.dispatchLatency.write(w, "simpletuner_dispatch_latency_seconds", "Time from a job becoming queued to its job_submit event.")
	m.writeArtifacts(counter)
	gauge("simpletuner_disk_full", "1 while writes fail because the database's or the artifacts' disk is full.", s.disk.Gauge())
	s.writeTeamMetrics(ctx, w)
	s.retention.WriteMetrics(w, counter, gauge)
	s.webhooks.WriteMetrics(ctx, w)
}

func sortedStatuses(m map[protocol.JobStatus]int) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, string(k))
	}
	sort.Strings(out)
	return out
}
