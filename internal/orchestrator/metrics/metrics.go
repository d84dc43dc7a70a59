// Package metrics holds the orchestrator's counters, which every part of the
// engine adds to and the /metrics scrape writes in the Prometheus text
// format. Gauges that live in the store are read at scrape, elsewhere.
package metrics

import (
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
	"github.com/simpletuner/simpletuner-orchestration/internal/store"
)

// Metrics are the orchestrator's counters.
type Metrics struct {
	Heartbeats      atomic.Int64
	StaleRejections atomic.Int64
	AuthFailures    atomic.Int64
	Dispatches      atomic.Int64
	Requeues        atomic.Int64
	Preemptions     atomic.Int64
	dispatchLatency histogram
	artifacts       artifactCounts
	gpuSeconds      gpuSecondsByWorker
}

// New returns zeroed metrics.
func New() *Metrics {
	return &Metrics{dispatchLatency: newHistogram([]float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60})}
}

// ObserveDispatch records the time from a job's submission (or requeue) to its
// job_submit event being queued on a stream.
func (m *Metrics) ObserveDispatch(d time.Duration) { m.dispatchLatency.observe(d.Seconds()) }

// WriteDispatchLatency writes the dispatch latency histogram.
func (m *Metrics) WriteDispatchLatency(w io.Writer) {
	m.dispatchLatency.write(w, "simpletuner_dispatch_latency_seconds", "Time from a job becoming queued to its job_submit event.")
}

// artifactCounts count uploads.
type artifactCounts struct {
	uploads  atomic.Int64
	bytes    atomic.Int64
	refusals atomic.Int64
}

// ArtifactStored counts an object stored, of size bytes.
func (m *Metrics) ArtifactStored(size int64) {
	m.artifacts.uploads.Add(1)
	m.artifacts.bytes.Add(size)
}

// ArtifactTooLarge counts an upload refused for its size.
func (m *Metrics) ArtifactTooLarge() { m.artifacts.refusals.Add(1) }

// WriteArtifacts writes the upload counters through counter.
func (m *Metrics) WriteArtifacts(counter func(name, help string, v int64)) {
	counter("simpletuner_artifact_uploads_total", "Artifact objects stored.", m.artifacts.uploads.Load())
	counter("simpletuner_artifact_upload_bytes_total", "Bytes of artifact objects stored.", m.artifacts.bytes.Load())
	counter("simpletuner_artifact_uploads_too_large_total", "Artifact uploads refused for passing max_object_bytes or max_job_bytes.", m.artifacts.refusals.Load())
}

// CountGPUSeconds adds an ended attempt's GPU-seconds to its worker's sum:
// as the worker measured them, or, from a worker that does not (SimpleTuner's
// agent, which runs a job with all its GPUs), its GPUs times the time the
// attempt ran.
func (m *Metrics) CountGPUSeconds(wk store.Worker, j store.Job, u *protocol.Usage) {
	if u != nil {
		m.gpuSeconds.add(wk.ID, u.GPUSeconds)
		return
	}
	if j.StartedAt != nil && j.EndedAt != nil {
		m.gpuSeconds.add(wk.ID, float64(wk.GPUInfo.Count)*j.EndedAt.Sub(*j.StartedAt).Seconds())
	}
}

// GPUSeconds is the sum of a worker's ended attempts' GPU-seconds recorded
// here; false when none was.
func (m *Metrics) GPUSeconds(workerID string) (float64, bool) { return m.gpuSeconds.get(workerID) }

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
