package worker

import (
	"context"
	"encoding/json"

	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
)

// onEvent handles one stream event. The type comes from "event:", or from the
// JSON's "type" when the orchestrator sent none (upstream's pings carry neither).
func (w *Worker) onEvent(ctx context.Context, ev sseEvent) (bool, error) {
	typ := ev.Event
	if typ == "" || typ == "message" {
		var head struct {
			Type string `json:"type"`
		}
		_ = json.Unmarshal([]byte(ev.Data), &head)
		typ = head.Type
	}
	switch typ {
	case "", protocol.EventPing:
	case protocol.EventJobSubmit:
		var sub protocol.JobSubmitEvent
		if err := json.Unmarshal([]byte(ev.Data), &sub); err != nil || sub.JobID == "" {
			w.log.Warn("ignoring a malformed job_submit", "err", err)
			return false, nil
		}
		w.onSubmit(ctx, &sub)
	case protocol.EventJobCancel:
		var c protocol.JobCancelEvent
		if err := json.Unmarshal([]byte(ev.Data), &c); err != nil {
			w.log.Warn("ignoring a malformed job_cancel", "err", err)
			return false, nil
		}
		if w.deferred.drop(c.JobID, c.Attempt) {
			w.log.Info("job_cancel for a job that waited for a stop here; dropped", "job_id", c.JobID, "attempt", c.Attempt)
			return false, nil
		}
		a := w.slots.holder(c.JobID)
		if a == nil || !a.matches(c.JobID, c.Attempt) {
			w.log.Info("job_cancel for an attempt this worker does not run; ignored", "job_id", c.JobID, "attempt", c.Attempt)
			return false, nil
		}
		w.stopJob(a, stopCancel, "cancelled by the orchestrator", a.cancelGrace(c.GraceSeconds))
	case protocol.EventDrain:
		return w.onOrchestratorDrain("drain event")
	case protocol.EventGPUClear:
		var c protocol.GPUClearEvent
		if err := json.Unmarshal([]byte(ev.Data), &c); err != nil {
			w.log.Warn("ignoring a malformed gpu_clear", "err", err)
			return false, nil
		}
		if w.gpus.clearFences(c.GPUs) {
			w.beats.soon()
		}
	case protocol.EventShutdown:
		var sh protocol.ShutdownEvent
		_ = json.Unmarshal([]byte(ev.Data), &sh)
		reason := sh.Reason
		if reason == "" {
			reason = sh.Data["reason"]
		}
		w.log.Warn("the orchestrator told the worker to shut down", "reason", reason)
		return true, w.shutdown("the orchestrator shut the worker down (" + reason + ")")
	default:
		w.log.Debug("ignoring an unknown stream event", "type", typ)
	}
	return false, nil
}
