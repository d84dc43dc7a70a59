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
