package protocol

import (
	"encoding/json"
	"testing"
)

func TestAssignedGPUsNamesUUIDsAndKeepsAnEmptyList(t *testing.T) {
	g := GPUSummary{Devices: []GPUDevice{{Index: 0, UUID: "GPU-a"}, {Index: 1}, {Index: 2, UUID: "GPU-c"}}}
	got, err := json.Marshal(g.AssignedGPUs([]int{2, 1}))
	if err != nil {
		t.Fatal(err)
	}
	if want := `[{"index":2,"uuid":"GPU-c"},{"index":1}]`; string(got) != want {
		t.Fatalf("assigned GPUs = %s, want %s", got, want)
	}
	// A job that takes no GPU is told so with an empty list; an absent list
	// would mean the whole worker.
	if none := g.AssignedGPUs(nil); none == nil || *none == nil || len(*none) != 0 {
		t.Fatalf("no GPUs = %v, want an empty list", none)
	}
	ev, _ := json.Marshal(JobSubmitEvent{GPUs: g.AssignedGPUs(nil)})
	var m map[string]any
	_ = json.Unmarshal(ev, &m)
	if gpus, ok := m["gpus"].([]any); !ok || len(gpus) != 0 {
		t.Fatalf("job_submit without GPUs = %s, want \"gpus\":[]", ev)
	}
}

// SimpleTuner's own agent reports a count; workerd lists its devices. Only
// a list is what the worker reported one by one; ParseGPUInfo makes up
// devices for a bare count so that placement can assign them.
func TestReportedDevicesAreOnlyTheListedOnes(t *testing.T) {
	upstream := json.RawMessage(`{"name":"NVIDIA A100","vram_gb":80,"count":2,"accelerator":"cuda"}`)
	if devs := ReportedDevices(upstream); devs != nil {
		t.Fatalf("devices of a count-only gpu_info = %+v, want none", devs)
	}
	if g := ParseGPUInfo(upstream); len(g.Devices) != 2 || g.Devices[1] != (GPUDevice{Index: 1, Name: "NVIDIA A100", MemoryMiB: 80 * 1024}) {
		t.Fatalf("parsed count-only gpu_info = %+v, want two made-up devices", g)
	}
	workerd := json.RawMessage(`{"name":"NVIDIA H100","count":1,"devices":[{"index":3,"uuid":"GPU-x","name":"NVIDIA H100","memory_mib":81559}]}`)
	want := []GPUDevice{{Index: 3, UUID: "GPU-x", Name: "NVIDIA H100", MemoryMiB: 81559}}
	if devs := ReportedDevices(workerd); len(devs) != 1 || devs[0] != want[0] {
		t.Fatalf("listed devices = %+v, want %+v", devs, want)
	}
	if devs := ReportedDevices(json.RawMessage(`not json`)); devs != nil {
		t.Fatalf("devices of unreadable gpu_info = %+v, want none", devs)
	}
}
