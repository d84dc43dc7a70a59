package placement

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"testing"

	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
	"github.com/simpletuner/simpletuner-orchestration/internal/store"
)

// fleet is placement's whole fixture: workers and leases in memory.
type fleet struct {
	workers map[string]store.Worker
	leases  map[string][]store.GPULease
	reads   int // GetWorkers calls
}

func (f *fleet) GetWorkers(_ context.Context, ids []string, statuses ...protocol.WorkerStatus) ([]store.Worker, error) {
	f.reads++
	var out []store.Worker
	for _, id := range ids {
		if w, ok := f.workers[id]; ok && (len(statuses) == 0 || slices.Contains(statuses, w.Status)) {
			out = append(out, w)
		}
	}
	return out, nil
}

func (f *fleet) GPULeases(_ context.Context, id string) ([]store.GPULease, error) {
	return f.leases[id], nil
}

// worker is a workerd with n GPUs of 80 GB running up to n jobs at once;
// held GPUs are leased to attempts.
func (f *fleet) worker(id string, n int, labels map[string]string, held ...int) {
	w := store.Worker{ID: id, Status: protocol.WorkerIdle, Protocol: 2, Labels: labels,
		Capabilities: protocol.Capabilities{MaxJobs: max(n, 1)},
		GPUInfo:      store.ReadGPUInfo(json.RawMessage(fmt.Sprintf(`{"count": %d, "vram_gb": 80}`, n)))}
	for _, g := range held {
		f.leases[id] = append(f.leases[id], store.GPULease{WorkerID: id, Index: g})
	}
	w.GPUsUsed, w.Running = len(held), min(len(held), 1)
	if len(held) > 0 {
		w.Status = protocol.WorkerPartial
	}
	f.workers[id] = w
}

func newFleet() *fleet {
	return &fleet{workers: map[string]store.Worker{}, leases: map[string][]store.GPULease{}}
}

func (f *fleet) pool(ids ...string) *Pool { return NewPool(context.Background(), f, ids) }

func job(id string, gpus int) store.QueuedJob {
	return store.QueuedJob{ID: id, GPUCount: gpus, Target: protocol.TargetAuto}
}

// Best fit: the worker left with the fewest free GPUs, so the large gap
// stays whole for a large job.
func TestBestFitKeepsLargeGapsWhole(t *testing.T) {
	f := newFleet()
	f.worker("w-8", 8, nil)
	f.worker("w-4", 4, nil, 0, 1) // two of four free
	p := f.pool("w-8", "w-4")
	best, gpus := BestFit(job("j", 2), p, Reservation{})
	if best == nil || best.W.ID != "w-4" || !slices.Equal(gpus, []int{2, 3}) {
		t.Fatalf("a 2-GPU job went to %v with GPUs %v, want w-4 with [2 3]", best, gpus)
	}
	// The pass gave w-4 its last GPUs: the next 2-GPU job goes to w-8.
	best.Took(job("j", 2), gpus)
	if b, _ := BestFit(job("k", 2), p, Reservation{}); b == nil || b.W.ID != "w-8" {
		t.Fatalf("second job on %v", b)
	}
}

// A perfect fit early in the pool ends the search: the rest of the fleet is
// not read.
func TestBestFitStopsAtAnExactFit(t *testing.T) {
	f := newFleet()
	var ids []string
	for i := range 100 {
		id := fmt.Sprintf("w-%03d", i)
		f.worker(id, 1, nil)
		ids = append(ids, id)
	}
	if b, _ := BestFit(job("j", 1), f.pool(ids...), Reservation{}); b == nil || b.W.ID != "w-000" {
		t.Fatalf("placed on %v", b)
	}
	if f.reads != 1 {
		t.Fatalf("read the workers %d times for an exact fit on the first page, want 1", f.reads)
	}
}

// A reserved worker takes no other job; the reserved job may have it.
func TestReservationHoldsTheWorker(t *testing.T) {
	f := newFleet()
	f.worker("w-big", 8, nil, 0) // seven free: a 8-GPU job waits for it
	p := f.pool("w-big")
	big := job("big", 8)
	if b, _ := BestFit(big, p, Reservation{}); b != nil {
		t.Fatalf("an 8-GPU job fitted a worker with seven free: %v", b.W.ID)
	}
	res := ReserveFor(big, p)
	if res != (Reservation{JobID: "big", WorkerID: "w-big"}) {
		t.Fatalf("reservation %+v", res)
	}
	if b, _ := BestFit(job("small", 1), p, res); b != nil {
		t.Fatalf("a small job took the reserved worker %s", b.W.ID)
	}
	if !p.AnyRoom() {
		t.Fatal("the reserved worker has room; AnyRoom says none")
	}
}

// Placement never offers a GPU an attempt holds or the worker keeps out of
// use, and a job that takes the whole worker needs it idle.
func TestFitLeavesHeldAndFencedGPUs(t *testing.T) {
	f := newFleet()
	f.worker("w", 4, nil, 1)
	w := f.workers["w"]
	w.GPUConditions = []protocol.GPUCondition{{Index: 2, State: "unhealthy"}}
	f.workers["w"] = w
	c := NewCandidate(w, f.leases["w"])
	if gpus, ok := c.Fit(job("j", 2)); !ok || !slices.Equal(gpus, []int{0, 3}) {
		t.Fatalf("fit %v %v, want [0 3]", gpus, ok)
	}
	if _, ok := c.Fit(job("j", 3)); ok {
		t.Fatal("three GPUs fitted where two are free")
	}
	whole := job("whole", 0)
	whole.WholeWorker = true
	if _, ok := c.Fit(whole); ok {
		t.Fatal("a whole-worker job fitted a worker running an attempt")
	}
	w.Running, w.GPUsUsed, w.Status = 0, 0, protocol.WorkerIdle
	idle := NewCandidate(w, nil)
	if gpus, ok := idle.Fit(whole); !ok || !slices.Equal(gpus, []int{0, 1, 3}) {
		t.Fatalf("whole worker got %v %v, want every GPU but the unhealthy one", gpus, ok)
	}
}

// Labels are globs; a job for remote workers never lands on a local one and
// an "auto" job prefers remote ones.
func TestMatchesAndLocalLast(t *testing.T) {
	f := newFleet()
	f.worker("local", 2, map[string]string{"gpu_type": "h100"})
	w := f.workers["local"]
	w.Local = true
	f.workers["local"] = w
	f.worker("remote", 8, map[string]string{"gpu_type": "a100-80g"})
	j := job("j", 1)
	j.WorkerLabels = map[string]string{"gpu_type": "a100*"}
	if !Matches(j, f.workers["remote"]) || Matches(j, f.workers["local"]) {
		t.Fatal("label glob a100* matched wrongly")
	}
	j.WorkerLabels = nil
	if b, _ := BestFit(j, f.pool("local", "remote"), Reservation{}); b == nil || b.W.ID != "remote" {
		t.Fatalf("an auto job went to %v, want the remote worker", b)
	}
	j.Target = protocol.TargetWorker
	if Matches(j, f.workers["local"]) {
		t.Fatal("a job for remote workers matched a local one")
	}
	j.MinVRAMGB = 81
	if Matches(j, f.workers["remote"]) {
		t.Fatal("a job asking 81 GB matched 80 GB GPUs")
	}
}

// Only idle and partial workers are read looking for room; a reservation
// weighs the busy ones too, ties going to the first in the pool however
// late it was read.
func TestBusyWorkersReadOnlyForAReservation(t *testing.T) {
	f := newFleet()
	f.worker("busy", 4, nil, 0, 1)
	w := f.workers["busy"]
	w.Status = protocol.WorkerBusy
	f.workers["busy"] = w
	f.worker("partial", 4, nil, 2, 3)
	p := f.pool("busy", "partial")
	big := job("big", 4)
	if b, _ := BestFit(big, p, Reservation{}); b != nil {
		t.Fatalf("a 4-GPU job fitted %s", b.W.ID)
	}
	if len(p.read) != 1 || p.read[0].W.ID != "partial" {
		t.Fatalf("looking for room read %d workers, want the partial one alone", len(p.read))
	}
	if res := ReserveFor(big, p); res != (Reservation{JobID: "big", WorkerID: "busy"}) {
		t.Fatalf("reservation %+v, want the busy worker: as many GPUs free, first in the pool", res)
	}
}

// A pass over a large fleet reads every worker, page after page, however
// many pages it takes: a job no worker matches, then its reservation.
func TestLargeFleetIsReadToTheEnd(t *testing.T) {
	f := newFleet()
	ids := make([]string, 2500)
	for i := range ids {
		ids[i] = fmt.Sprintf("w-%04d", i)
		f.worker(ids[i], 2, nil, 0) // one GPU busy: room for a 1-GPU job only
	}
	p := f.pool(ids...)
	nowhere := job("nowhere", 1)
	nowhere.WorkerLabels = map[string]string{"zone": "mars"}
	if b, _ := BestFit(nowhere, p, Reservation{}); b != nil {
		t.Fatalf("a job for zone mars fitted %s", b.W.ID)
	}
	if len(p.read) != len(ids) {
		t.Fatalf("read %d workers of %d", len(p.read), len(ids))
	}
	big := job("big", 2)
	if res := ReserveFor(big, p); res.WorkerID != "w-0000" {
		t.Fatalf("reservation %+v, want the first worker", res)
	}
}
