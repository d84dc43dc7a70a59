package store

import (
	"encoding/json"
	"reflect"
	"strconv"
	"testing"

	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
)

const eightGPUs = `{"name":"NVIDIA H100 80GB HBM3","vram_gb":80,"count":8,"accelerator":"cuda","devices":[` +
	`{"index":0,"uuid":"GPU-0","name":"NVIDIA H100 80GB HBM3","memory_mib":81559},{"index":1,"uuid":"GPU-1","name":"NVIDIA H100 80GB HBM3","memory_mib":81559},` +
	`{"index":2,"uuid":"GPU-2","name":"NVIDIA H100 80GB HBM3","memory_mib":81559},{"index":3,"uuid":"GPU-3","name":"NVIDIA H100 80GB HBM3","memory_mib":81559},` +
	`{"index":4,"uuid":"GPU-4","name":"NVIDIA H100 80GB HBM3","memory_mib":81559},{"index":5,"uuid":"GPU-5","name":"NVIDIA H100 80GB HBM3","memory_mib":81559},` +
	`{"index":6,"uuid":"GPU-6","name":"NVIDIA H100 80GB HBM3","memory_mib":81559},{"index":7,"uuid":"GPU-7","name":"NVIDIA H100 80GB HBM3","memory_mib":81559}]}`

// A worker row is read many times on a job's way to its worker, always with
// the same gpu_info: reading it again costs a copy of the devices, not a
// parse.
func TestReadGPUInfoParsesEachTextOnce(t *testing.T) {
	raw := json.RawMessage(eightGPUs)
	want := protocol.ParseGPUInfo(raw)
	if got := ReadGPUInfo(raw); !reflect.DeepEqual(got.GPUSummary, want) || string(got.Raw) != eightGPUs {
		t.Fatalf("ReadGPUInfo = %+v, want %+v", got, want)
	}
	if n := testing.AllocsPerRun(100, func() { ReadGPUInfo(raw) }); n > 1 {
		t.Fatalf("reading a known gpu_info again allocates %.0f times, want at most 1 (the devices' copy)", n)
	}
}

func TestReadGPUInfoCopiesDevices(t *testing.T) {
	raw := json.RawMessage(eightGPUs)
	first := ReadGPUInfo(raw)
	first.Devices[0].UUID = "changed by a caller"
	if again := ReadGPUInfo(raw); again.Devices[0].UUID != "GPU-0" {
		t.Fatalf("a caller's change to its devices reached the next reader: %q", again.Devices[0].UUID)
	}
	if g := ReadGPUInfo(json.RawMessage(`not json`)); g.Count != 0 || g.Devices != nil {
		t.Fatalf("unreadable gpu_info = %+v, want no GPU", g.GPUSummary)
	}
}

func TestGPUInfoMemoStartsOverWhenFull(t *testing.T) {
	m := gpuInfoMemo{m: map[string]protocol.GPUSummary{}}
	for i := range gpuInfoMemoSize + 10 {
		m.parse(json.RawMessage(`{"count":1,"n":` + strconv.Itoa(i) + `}`))
	}
	if len(m.m) > gpuInfoMemoSize {
		t.Fatalf("the memo holds %d texts, more than %d", len(m.m), gpuInfoMemoSize)
	}
}
