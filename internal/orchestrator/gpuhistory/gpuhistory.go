// Package gpuhistory keeps the numbers behind the dashboard's GPU charts:
// each worker's GPUs (utilisation and memory in use) and the fleet's GPUs in
// use against those the queued jobs ask for, over the last six hours, a point
// a minute. They live in memory, in the instance that sees them (the
// heartbeats it receives, the fleet it reads from the store), start empty
// after a restart, and cost two bytes per GPU and minute.
package gpuhistory

import (
	"maps"
	"math"
	"sync"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/api"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator/liveness"
	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
)

const (
	// Step is the time between two points of a chart.
	Step          = time.Minute
	historyPoints = 360
)

// noSample marks a minute without a sample.
const noSample = math.MaxUint8

// ring holds one number per minute for the last historyPoints minutes. The
// open minute keeps a sum and a count; minutes before it are stored rounded.
type ring struct {
	last   int64 // the open minute (Unix minutes); 0 before the first sample
	vals   [historyPoints]uint8
	sum    float64
	n      int
	useMax bool // the minute's value is its largest sample, else the mean
}

func newRing(useMax bool) *ring {
	r := &ring{useMax: useMax}
	for i := range r.vals {
		r.vals[i] = noSample
	}
	return r
}

// add records v (0–100) at minute m.
func (r *ring) add(m int64, v float64) {
	v = min(max(v, 0), 100)
	if m < r.last {
		return // a late sample of a closed minute
	}
	if m > r.last {
		r.close()
		for gap := min(m-r.last, historyPoints); r.last != 0 && gap > 1; gap-- {
			r.vals[(m-gap+1)%historyPoints] = noSample // minutes nothing came in
		}
		r.last, r.sum, r.n = m, 0, 0
	}
	if r.useMax {
		r.sum = max(r.sum, v)
		r.n = 1
		return
	}
	r.sum += v
	r.n++
}

// close stores the open minute's value.
func (r *ring) close() {
	if r.n == 0 {
		return
	}
	v := r.sum
	if !r.useMax {
		v /= float64(r.n)
	}
	r.vals[r.last%historyPoints] = uint8(math.Round(v))
}

// points lists the minutes up to now, oldest first: nil for a minute
// without a sample.
func (r *ring) points(now int64) []*float64 {
	out := make([]*float64, historyPoints)
	for i := range out {
		m := now - historyPoints + 1 + int64(i)
		switch {
		case m == r.last && r.n > 0:
			v := r.sum
			if !r.useMax {
				v /= float64(r.n)
			}
			out[i] = &v
		case m < r.last && m > r.last-historyPoints && r.vals[m%historyPoints] != noSample:
			v := float64(r.vals[m%historyPoints])
			out[i] = &v
		}
	}
	return out
}

type gpuSeries struct {
	uuid      string
	util, mem *ring // utilisation and memory in use, in percent
}

// History keeps the charts' numbers. Safe for concurrent use.
type History struct {
	mu      sync.Mutex
	workers map[string]map[int]*gpuSeries
	// The fleet's GPUs, counted: in use, asked for by queued jobs, online.
	inUse, asked, online []fleetPoint
}

type fleetPoint struct {
	minute int64
	v      int
}

// New returns an empty history.
func New() *History { return &History{workers: map[string]map[int]*gpuSeries{}} }

func minuteOf(t time.Time) int64 { return t.Unix() / int64(Step/time.Second) }

// NoteTelemetry records a heartbeat's GPU numbers, of the GPUs in the
// worker's registered inventory (their indexes) only, and drops the series
// of GPUs no longer in it: a worker keeps at most MaxTelemetryGPUs series,
// whatever indexes its heartbeats name.
func (h *History) NoteTelemetry(workerID string, gpus []protocol.GPUTelemetry, inventory map[int]bool, at time.Time) {
	if len(gpus) == 0 {
		return
	}
	m := minuteOf(at)
	h.mu.Lock()
	defer h.mu.Unlock()
	byIndex := h.workers[workerID]
	if byIndex == nil {
		byIndex = map[int]*gpuSeries{}
		h.workers[workerID] = byIndex
	}
	maps.DeleteFunc(byIndex, func(i int, _ *gpuSeries) bool { return !inventory[i] })
	for _, g := range gpus[:min(len(gpus), liveness.MaxTelemetryGPUs)] {
		if !inventory[g.Index] || g.Index >= liveness.MaxTelemetryGPUs {
			continue // not charted: Worker shows the first MaxTelemetryGPUs indexes
		}
		s := byIndex[g.Index]
		if s == nil || s.uuid != g.UUID {
			s = &gpuSeries{uuid: g.UUID, util: newRing(false), mem: newRing(true)}
			byIndex[g.Index] = s
		}
		s.util.add(m, g.UtilizationPct)
		if g.MemoryTotalMiB > 0 {
			s.mem.add(m, 100*float64(g.MemoryUsedMiB)/float64(g.MemoryTotalMiB))
		}
	}
	if len(byIndex) == 0 {
		delete(h.workers, workerID)
	}
}

// Series counts the GPU series kept, over all workers.
func (h *History) Series() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, byIndex := range h.workers {
		n += len(byIndex)
	}
	return n
}

// Forget drops a deleted worker's history.
func (h *History) Forget(workerID string) {
	h.mu.Lock()
	delete(h.workers, workerID)
	h.mu.Unlock()
}

// NoteFleet records the fleet's counts at the minute of at, replacing a count
// already taken in that minute.
func (h *History) NoteFleet(at time.Time, inUse, asked, online int) {
	m := minuteOf(at)
	h.mu.Lock()
	defer h.mu.Unlock()
	put := func(s []fleetPoint, v int) []fleetPoint {
		if n := len(s); n > 0 && s[n-1].minute == m {
			s[n-1].v = v
			return s
		}
		s = append(s, fleetPoint{m, v})
		for len(s) > 0 && s[0].minute <= m-historyPoints {
			s = s[1:]
		}
		return s
	}
	h.inUse, h.asked, h.online = put(h.inUse, inUse), put(h.asked, asked), put(h.online, online)
}

// Worker is a worker's GPUs over the six hours before now.
func (h *History) Worker(workerID string, now time.Time) api.GPUHistory {
	m := minuteOf(now)
	v := api.GPUHistory{StepSeconds: int(Step / time.Second), Start: protocol.Time(time.Unix((m-historyPoints+1)*60, 0)), GPUs: []api.GPUSeries{}}
	h.mu.Lock()
	defer h.mu.Unlock()
	for i := 0; i < liveness.MaxTelemetryGPUs; i++ {
		s, ok := h.workers[workerID][i]
		if !ok {
			continue
		}
		v.GPUs = append(v.GPUs, api.GPUSeries{Index: i, UUID: s.uuid, UtilizationPct: s.util.points(m), MemoryUsedPct: s.mem.points(m)})
	}
	return v
}

// Fleet is the fleet's GPU counts over the six hours before now.
func (h *History) Fleet(now time.Time) api.FleetHistory {
	m := minuteOf(now)
	h.mu.Lock()
	defer h.mu.Unlock()
	points := func(s []fleetPoint) []*float64 {
		out := make([]*float64, historyPoints)
		for _, p := range s {
			if i := p.minute - (m - historyPoints + 1); i >= 0 && i < historyPoints {
				v := float64(p.v)
				out[i] = &v
			}
		}
		return out
	}
	return api.FleetHistory{StepSeconds: int(Step / time.Second), Start: protocol.Time(time.Unix((m-historyPoints+1)*60, 0)),
		InUse: points(h.inUse), Asked: points(h.asked), Online: points(h.online)}
}
