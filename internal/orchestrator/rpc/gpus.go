package rpc

import (
	"context"
	"fmt"
	"io"
	"reflect"
	"slices"

	"github.com/simpletuner/simpletuner-orchestration/internal/audit"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator/transitions"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator/web"
	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
	"github.com/simpletuner/simpletuner-orchestration/internal/store"
)

// A protocol-2 worker reports the GPUs it keeps out of use (held back
// because a job left a process on them, or unhealthy after a hardware
// fault) with every registration, heartbeat and terminal report. They are
// stored on the worker; placement and the store's claim give them to no
// job. An unhealthy GPU stays so until an admin clears it: the clear is
// kept on the worker and told to it (a gpu_clear event, and in every
// heartbeat reply) until it no longer reports the fence.

// noteGPUConditions stores the conditions a worker reported when they
// differ from those stored, and audits the change. reported nil (the worker
// does not report them) changes nothing. A condition of a GPU that is not
// in the worker's registered inventory is not kept: no job is placed on
// such a GPU anyway, and what a worker token could make the store keep
// stays bounded by its inventory.
func (s *Protocol) noteGPUConditions(ctx context.Context, wk store.Worker, reported *[]protocol.GPUCondition, ip string) (store.Worker, error) {
	if reported == nil {
		return wk, nil
	}
	if err := checkGPUConditions(reported); err != nil {
		return wk, err
	}
	conds := ofInventory(*reported, inventoryIndexes(wk))
	if len(conds) == 0 {
		conds = nil
	}
	if sameConditions(wk.GPUConditions, conds) && len(wk.GPUClears) == 0 {
		return wk, nil
	}
	var changes map[string]any
	updated, err := s.Store.UpdateWorker(ctx, wk.ID, func(cur *store.Worker) (*audit.Record, error) {
		changes = conditionChanges(cur.GPUConditions, conds)
		cur.GPUConditions = conds
		// A clear is done once the worker no longer reports the fence.
		cur.GPUClears = slices.DeleteFunc(cur.GPUClears, func(i int) bool { return !fenced(conds, i) })
		if len(changes) == 0 {
			return nil, nil
		}
		changes["name"] = cur.Name
		rec := audit.New(transitions.WorkerActor(wk), ip, "worker.gpus", "worker", wk.ID, audit.Success, changes)
		return &rec, nil
	})
	if err != nil {
		return wk, err
	}
	if len(changes) > 0 {
		s.Log.Warn("the worker's GPU conditions changed", "worker_id", wk.ID, "name", updated.Name, "changes", changes)
		s.Wake() // a released GPU may take a job now
	}
	return updated, nil
}

// checkGPUConditions refuses reported conditions past the protocol's
// limits, naming the field; nil (none reported) passes.
func checkGPUConditions(reported *[]protocol.GPUCondition) error {
	if reported == nil {
		return nil
	}
	if err := protocol.CheckGPUConditions(*reported); err != nil {
		return web.Invalid("%v", err)
	}
	return nil
}

// inventoryIndexes are the indexes of the GPUs in the worker's registered
// inventory (those a report may name).
func inventoryIndexes(wk store.Worker) map[int]bool {
	out := make(map[int]bool, len(wk.GPUInfo.Devices))
	for _, d := range wk.GPUInfo.Devices {
		if d.Index >= 0 && d.Index < protocol.MaxGPUs {
			out[d.Index] = true
		}
	}
	return out
}

// ofInventory keeps the conditions of GPUs in the inventory.
func ofInventory(conds []protocol.GPUCondition, inventory map[int]bool) []protocol.GPUCondition {
	return slices.DeleteFunc(slices.Clone(conds), func(c protocol.GPUCondition) bool { return !inventory[c.Index] })
}

func sameConditions(a, b []protocol.GPUCondition) bool {
	return reflect.DeepEqual(a, b) || (len(a) == 0 && len(b) == 0)
}

// conditionChanges describes what moved between two reports, by GPU:
// newly held or unhealthy, released, fence lifted.
func conditionChanges(before, after []protocol.GPUCondition) map[string]any {
	changes := map[string]any{}
	add := func(key string, c protocol.GPUCondition) {
		list, _ := changes[key].([]string)
		changes[key] = append(list, fmt.Sprintf("GPU %d (%s): %s", c.Index, c.UUID, c.Reason))
	}
	was := map[int]protocol.GPUCondition{}
	for _, c := range before {
		was[c.Index] = c
	}
	for _, c := range after {
		if old, ok := was[c.Index]; !ok || old.State != c.State || old.Reason != c.Reason {
			add(c.State, c)
		}
		delete(was, c.Index)
	}
	for _, c := range was {
		if c.State == protocol.GPUUnhealthy {
			add("fence_lifted", c)
		} else {
			add("released", c)
		}
	}
	return changes
}

// fenced reports whether GPU i is unhealthy in conds.
func fenced(conds []protocol.GPUCondition, i int) bool {
	return slices.ContainsFunc(conds, func(c protocol.GPUCondition) bool { return c.Index == i && c.State == protocol.GPUUnhealthy })
}

// WriteGPUMetrics writes each worker's GPUs: the live numbers its heartbeats
// to this instance carried, labelled by worker and GPU; the GPUs it keeps
// out of use (from the store: every instance says the same); and the
// GPU-seconds of the attempts that ended here.
func (s *Protocol) WriteGPUMetrics(w io.Writer, workers []store.Worker) {
	type series struct {
		name, help, typ string
		lines           []string
	}
	all := []*series{
		{name: "simpletuner_gpu_utilization_percent", help: "GPU utilisation, from the worker's last heartbeat here.", typ: "gauge"},
		{name: "simpletuner_gpu_memory_used_bytes", help: "GPU memory in use, from the worker's last heartbeat here.", typ: "gauge"},
		{name: "simpletuner_gpu_memory_total_bytes", help: "GPU memory in all.", typ: "gauge"},
		{name: "simpletuner_gpu_temperature_celsius", help: "GPU temperature.", typ: "gauge"},
		{name: "simpletuner_gpu_power_watts", help: "GPU power draw.", typ: "gauge"},
		{name: "simpletuner_gpu_healthy", help: "1 while the GPU may be given to jobs, 0 while it is held back or unhealthy.", typ: "gauge"},
		{name: "simpletuner_gpu_condition", help: "1 for each GPU a worker keeps out of use, by state (held, unhealthy).", typ: "gauge"},
		{name: "simpletuner_worker_gpu_seconds_total", help: "GPU-seconds of the attempts whose end this instance recorded (GPUs held × time run).", typ: "counter"},
	}
	add := func(i int, labels string, v float64) {
		all[i].lines = append(all[i].lines, fmt.Sprintf("%s{%s} %g", all[i].name, labels, v))
	}
	for _, wk := range workers {
		who := fmt.Sprintf("worker=%q,name=%q", wk.ID, wk.Name)
		out := wk.Capacity().UnavailableGPUs()
		if t := s.Heard.Telemetry(wk.ID); t != nil {
			for _, g := range t.GPUs {
				l := fmt.Sprintf("%s,index=\"%d\",uuid=%q", who, g.Index, g.UUID)
				add(0, l, g.UtilizationPct)
				add(1, l, float64(g.MemoryUsedMiB)*(1<<20))
				if g.MemoryTotalMiB > 0 {
					add(2, l, float64(g.MemoryTotalMiB)*(1<<20))
				}
				add(3, l, g.TemperatureC)
				if g.PowerW > 0 {
					add(4, l, g.PowerW)
				}
				healthy := 1.0
				if out[g.Index] {
					healthy = 0
				}
				add(5, l, healthy)
			}
		}
		for _, c := range wk.GPUConditions {
			add(6, fmt.Sprintf("%s,index=\"%d\",uuid=%q,state=%q", who, c.Index, c.UUID, c.State), 1)
		}
		if v, ok := s.Metrics.GPUSeconds(wk.ID); ok {
			add(7, who, v)
		}
	}
	for _, m := range all {
		fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s %s\n", m.name, m.help, m.name, m.typ)
		for _, l := range m.lines {
			fmt.Fprintln(w, l)
		}
	}
}
