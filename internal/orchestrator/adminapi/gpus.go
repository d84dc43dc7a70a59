package adminapi

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/julienschmidt/httprouter"

	"github.com/simpletuner/simpletuner-orchestration/internal/api"
	"github.com/simpletuner/simpletuner-orchestration/internal/audit"
	"github.com/simpletuner/simpletuner-orchestration/internal/auth"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator/web"
	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
	"github.com/simpletuner/simpletuner-orchestration/internal/store"
)

func gpuRef(_ http.ResponseWriter, _ *http.Request, ps httprouter.Params) (api.WorkerRef, error) {
	index, err := strconv.Atoi(ps.ByName("index"))
	if err != nil || index < 0 {
		return api.WorkerRef{}, web.Invalid("the GPU index in the path must be a whole number from 0; got %q", ps.ByName("index"))
	}
	return api.WorkerRef{ID: ps.ByName("id"), GPU: index}, nil
}

// ClearGPU lifts the fence of an unhealthy GPU (the hardware was serviced,
// or the fault was a fluke). The worker is told now and with every heartbeat
// reply until it no longer reports the fence.
func (a *API) ClearGPU(ctx context.Context, ref api.WorkerRef) (api.WorkerAction, error) {
	c, wk, err := a.adminWorker(ctx, ref.ID)
	if err != nil {
		return api.WorkerAction{}, err
	}
	index := ref.GPU
	var cond protocol.GPUCondition
	errNotFenced := errors.New("not fenced")
	_, err = a.store.UpdateWorker(ctx, wk.ID, func(cur *store.Worker) (*audit.Record, error) {
		i := slices.IndexFunc(cur.GPUConditions, func(c protocol.GPUCondition) bool { return c.Index == index })
		if i < 0 || cur.GPUConditions[i].State != protocol.GPUUnhealthy {
			return nil, errNotFenced
		}
		cond = cur.GPUConditions[i]
		if !slices.Contains(cur.GPUClears, index) {
			cur.GPUClears = append(cur.GPUClears, index)
		}
		rec := audit.New(c.Actor(), c.IP, "worker.gpu_clear", "worker", wk.ID, audit.Success,
			map[string]any{"name": cur.Name, "gpu": index, "uuid": cond.UUID, "was": cond.Reason})
		return &rec, nil
	})
	if errors.Is(err, errNotFenced) {
		return api.WorkerAction{}, web.Conflict("GPU %d of worker %s is not fenced as unhealthy; a GPU held back for a leftover process is released by the worker once it is clean", index, wk.ID)
	}
	if err != nil {
		return api.WorkerAction{}, err
	}
	a.log.Info("GPU fence cleared by an admin", "worker_id", wk.ID, "gpu", index, "uuid", cond.UUID, "was", cond.Reason, "by", c.Actor())
	a.events.SendToWorker(wk.ID, protocol.EventGPUClear, protocol.GPUClearEvent{Type: protocol.EventGPUClear, GPUs: []int{index}})
	return api.WorkerAction{Success: true, WorkerID: wk.ID, GPU: &index, Status: "clearing"}, nil
}

// WorkerGPUHistory is the worker's GPUs over the last six hours.
func (a *API) WorkerGPUHistory(ctx context.Context, ref api.WorkerRef) (api.GPUHistory, error) {
	_, wk, err := a.adminWorker(ctx, ref.ID)
	if err != nil {
		return api.GPUHistory{}, err
	}
	return a.gpuHistory.Worker(wk.ID, time.Now()), nil
}

// FleetGPUHistory is the fleet's GPUs over the last six hours.
func (a *API) FleetGPUHistory(ctx context.Context, _ struct{}) (api.FleetHistory, error) {
	if _, err := authorize(ctx, auth.ScopeQueueView); err != nil {
		return api.FleetHistory{}, err
	}
	return a.gpuHistory.Fleet(time.Now()), nil
}
