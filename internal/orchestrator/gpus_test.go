package orchestrator_test

import (
	"fmt"
	"strings"
	"testing"
)

// gpuBeat is a heartbeat's gpus: n GPUs from index first, each with a UUID
// of uuidLen characters.
func gpuBeat(first, n, uuidLen int) []map[string]any {
	gpus := make([]map[string]any, n)
	for k := range gpus {
		id := fmt.Sprintf("GPU-%d-", first+k)
		gpus[k] = map[string]any{"index": first + k, "uuid": id + strings.Repeat("x", max(uuidLen-len(id), 0)),
			"utilization_pct": 50, "memory_used_mib": 1, "memory_total_mib": 2, "temperature_c": 40}
	}
	return gpus
}

// A worker token cannot grow the orchestrator's memory with made-up GPUs:
// heartbeats with indexes out of range or UUIDs past the limit are refused
// (422 naming the field, nothing noted), and valid ones keep history for
// the GPUs of the worker's inventory only.
func TestGPUTelemetryFloodIsBounded(t *testing.T) {
	t.Parallel()
	e := setup(t, backends["sqlite"](t))
	a := e.startAgent("gpu-box", nil, map[string]any{"name": "NVIDIA A100", "count": 2, "vram_gb": 80})
	e.Must(a.heartbeat("idle", nil, map[string]any{"gpus": gpuBeat(0, 2, 40)}), 200)

	// The flood: fresh indexes and 12 kB UUIDs in every heartbeat.
	for beat := range 30 {
		r := a.heartbeat("idle", nil, map[string]any{"gpus": gpuBeat(2+beat*64, 64, 12*1024)})
		if r.Status != 422 {
			t.Fatalf("flood heartbeat %d: HTTP %d, want 422: %s", beat, r.Status, r.Body)
		}
	}
	// Valid heartbeats naming GPUs the worker did not register, each time
	// with other UUIDs: accepted, but only its two GPUs are charted.
	for beat := range 30 {
		gpus := gpuBeat(0, 64, 40)
		for _, g := range gpus {
			g["uuid"] = fmt.Sprintf("GPU-%d-%v", beat, g["index"])
		}
		e.Must(a.heartbeat("idle", nil, map[string]any{"gpus": gpus}), 200)
	}
	if n := e.srv.GPUHistory().Series(); n != 2 {
		t.Fatalf("the history keeps %d GPU series for a worker with 2 GPUs", n)
	}

	// Each limit is refused naming the field, and the refusal notes nothing.
	before := mustJSON(e.Worker(a.id)["gpu_telemetry"])
	long := gpuBeat(0, 4, 40)
	long[3]["uuid"] = strings.Repeat("u", 129)
	dup := gpuBeat(0, 2, 40)
	dup[1]["index"] = 0
	esc := gpuBeat(0, 2, 40)
	esc[1]["health"] = "ok\x1b]0;owned\x07"
	for _, c := range []struct {
		body map[string]any
		want string
	}{
		{map[string]any{"gpus": long}, `field "gpus[3].uuid" is longer than 128 characters (129)`},
		{map[string]any{"gpus": gpuBeat(1024, 1, 40)}, `field "gpus[0].index" is 1024; a GPU index is 0 to 1023`},
		{map[string]any{"gpus": gpuBeat(-1, 1, 40)}, `field "gpus[0].index" is -1`},
		{map[string]any{"gpus": dup}, `field "gpus[1].index" is 0, which an earlier entry lists too`},
		{map[string]any{"gpus": esc}, `field "gpus[1].health" has the control character U+001B`},
		{map[string]any{"gpus": gpuBeat(0, 1025, 0)}, `field "gpus" lists 1025 GPUs; at most 1024`},
		{map[string]any{"gpus": gpuBeat(0, 1, 40), "gpu_conditions": []map[string]any{{"index": 0, "state": "held",
			"reason": "pid 1 (\x1b[2Jx)"}}}, `field "gpu_conditions[0].reason" has the control character U+001B`},
		{map[string]any{"gpu_conditions": []map[string]any{{"index": 1, "state": "held", "reason": strings.Repeat("r", 1025)}}},
			`field "gpu_conditions[0].reason" is longer than 1024 characters (1025)`},
		{map[string]any{"gpu_conditions": []map[string]any{{"index": 1, "uuid": strings.Repeat("u", 200), "state": "held"}}},
			`field "gpu_conditions[0].uuid" is longer than 128 characters (200)`},
	} {
		r := a.heartbeat("idle", nil, c.body)
		if r.Status != 422 || r.JSON["error"] != "invalid_request" || !strings.Contains(fmt.Sprint(r.JSON["detail"]), c.want) {
			t.Errorf("HTTP %d %s; want 422 with %q", r.Status, r.Body, c.want)
		}
	}
	w := e.Worker(a.id)
	if conds, _ := w["gpu_conditions"].([]any); mustJSON(w["gpu_telemetry"]) != before || len(conds) != 0 {
		t.Fatalf("refused heartbeats changed the worker's telemetry or conditions (%v)", conds)
	}
	if n := e.srv.GPUHistory().Series(); n != 2 {
		t.Fatalf("the history keeps %d GPU series after refused heartbeats", n)
	}

	// A registration's and a status report's conditions are checked alike.
	r := a.register(map[string]any{"name": "gpu-box", "gpu_conditions": []map[string]any{{"index": 1, "state": "held", "since": strings.Repeat("9", 65)}}})
	if r.Status != 422 || !strings.Contains(string(r.Body), `gpu_conditions[0].since`) {
		t.Fatalf("registration with a 65-character since: HTTP %d %s", r.Status, r.Body)
	}
}

// A condition of a GPU outside the worker's inventory is not kept; those
// of its own GPUs are.
func TestGPUConditionsOfTheInventoryOnly(t *testing.T) {
	t.Parallel()
	e := setup(t, backends["sqlite"](t))
	a := e.startAgent("gpu-box", nil, map[string]any{"name": "NVIDIA A100", "count": 2, "vram_gb": 80})
	conds := []map[string]any{
		{"index": 1, "uuid": "GPU-1", "state": "unhealthy", "reason": "XID 79 (fell off the bus)", "since": "2030-01-01T00:00:00Z"},
		{"index": 7, "uuid": "GPU-7", "state": "unhealthy", "reason": "made up", "since": "2030-01-01T00:00:00Z"},
	}
	e.Must(a.heartbeat("idle", nil, map[string]any{"gpu_conditions": conds}), 200)
	got, _ := e.Worker(a.id)["gpu_conditions"].([]any)
	if len(got) != 1 || got[0].(map[string]any)["index"] != 1.0 {
		t.Fatalf("conditions kept: %v", got)
	}
}
