package orchestrator

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sort"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator/metrics"
	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
	"github.com/simpletuner/simpletuner-orchestration/internal/store"
	"github.com/simpletuner/simpletuner-orchestration/internal/version"
)

// Metrics are the orchestrator's counters (package metrics), written in the
// Prometheus text format by MetricsHandler.
type Metrics = metrics.Metrics

// NewMetrics returns zeroed metrics.
func NewMetrics() *Metrics { return metrics.New() }

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
		status, _ := s.proto.Shown(wk)
		byStatus[status]++
		workers = append(workers, wk)
	}); err == nil {
		fmt.Fprintf(w, "# HELP simpletuner_workers Workers by status.\n# TYPE simpletuner_workers gauge\n")
		for _, st := range []protocol.WorkerStatus{protocol.WorkerConnecting, protocol.WorkerIdle, protocol.WorkerPartial, protocol.WorkerBusy, protocol.WorkerDraining, protocol.WorkerDisconnected, protocol.WorkerOffline} {
			fmt.Fprintf(w, "simpletuner_workers{status=%q} %d\n", st, byStatus[st])
		}
		s.proto.WriteGPUMetrics(w, workers)
	}
	gauge("simpletuner_sse_connections", "Worker event streams open on this instance.", int64(s.hub.Count()))
	counter("simpletuner_heartbeats_total", "Heartbeats received.", m.Heartbeats.Load())
	counter("simpletuner_dispatches_total", "job_submit events sent.", m.Dispatches.Load())
	counter("simpletuner_requeues_total", "Attempts that ended with the job back in the queue.", m.Requeues.Load())
	counter("simpletuner_preemptions_total", "Running jobs this instance preempted for another team's job (or one of higher priority).", m.Preemptions.Load())
	counter("simpletuner_stale_attempt_rejections_total", "Reports refused because they came from a stale attempt.", m.StaleRejections.Load())
	counter("simpletuner_auth_failures_total", "Requests refused for a missing, unknown or rate-limited credential.", m.AuthFailures.Load())
	counter("simpletuner_sse_slow_streams_dropped_total", "Worker streams closed because their reader fell behind.", s.hub.Dropped())
	m.WriteDispatchLatency(w)
	m.WriteArtifacts(counter)
	gauge("simpletuner_disk_full", "1 while writes fail because the database's or the artifacts' disk is full.", s.disk.Gauge())
	s.sched.WriteTeamMetrics(ctx, w)
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
