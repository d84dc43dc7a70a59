package gpu

import (
	"encoding/json"
	"testing"

	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
)

// The GPU record goes out byte for byte as below: in the register body's
// gpu_info (which SimpleTuner's own agent and orchestrator read as well),
// in the heartbeat's gpus, and in workerd --detect-gpus, which adds where
// jobs open each GPU. A change of a name, a tag or the order fails here.
func TestTheGPURecordOnTheWire(t *testing.T) {
	t.Parallel()
	inv := Inventory{Vendor: VendorNVIDIA, Count: 2, Driver: "550.54.15", CUDAVersion: "12.4", Devices: []Device{
		{GPUDevice: protocol.GPUDevice{Index: 0, UUID: "GPU-0aa", Name: "NVIDIA H100 80GB HBM3", MemoryMiB: 81559}, DeviceNode: "/dev/nvidia0"},
		{GPUDevice: protocol.GPUDevice{Index: 1, UUID: "GPU-1bb", Name: "NVIDIA H100 80GB HBM3", MemoryMiB: 81559}},
	}}
	info, err := json.Marshal(inv.GPUInfo())
	if err != nil {
		t.Fatal(err)
	}
	register, _ := json.Marshal(protocol.RegisterRequest{Name: "gpu-box", GPUInfo: info, Persistent: true, Protocol: 2, Version: "1.2.3"})
	const wantRegister = `{"name":"gpu-box","gpu_info":{"name":"NVIDIA H100 80GB HBM3","vram_gb":79.6,"count":2,"driver":"550.54.15",` +
		`"accelerator":"cuda","cuda_version":"12.4","devices":[{"index":0,"uuid":"GPU-0aa","name":"NVIDIA H100 80GB HBM3","memory_mib":81559},` +
		`{"index":1,"uuid":"GPU-1bb","name":"NVIDIA H100 80GB HBM3","memory_mib":81559}]},"persistent":true,"protocol":2,"version":"1.2.3"}`
	if string(register) != wantRegister {
		t.Errorf("register body\n got %s\nwant %s", register, wantRegister)
	}

	heartbeat, _ := json.Marshal(protocol.HeartbeatRequest{WorkerID: "w1", Status: "idle", GPUs: []Telemetry{
		{Index: 0, UUID: "GPU-0aa", UtilizationPct: 97, MemoryUsedMiB: 40000, MemoryTotalMiB: 81559, TemperatureC: 61, PowerW: 512.5, Health: "ok"},
	}})
	const wantHeartbeat = `{"worker_id":"w1","status":"idle","gpus":[{"index":0,"uuid":"GPU-0aa","utilization_pct":97,"memory_used_mib":40000,` +
		`"memory_total_mib":81559,"temperature_c":61,"power_w":512.5,"health":"ok"}]}`
	if string(heartbeat) != wantHeartbeat {
		t.Errorf("heartbeat body\n got %s\nwant %s", heartbeat, wantHeartbeat)
	}

	detected, _ := json.Marshal(inv)
	const wantDetected = `{"vendor":"nvidia","count":2,"driver":"550.54.15","cuda_version":"12.4","devices":[` +
		`{"index":0,"uuid":"GPU-0aa","name":"NVIDIA H100 80GB HBM3","memory_mib":81559,"device_node":"/dev/nvidia0"},` +
		`{"index":1,"uuid":"GPU-1bb","name":"NVIDIA H100 80GB HBM3","memory_mib":81559}]}`
	if string(detected) != wantDetected {
		t.Errorf("inventory\n got %s\nwant %s", detected, wantDetected)
	}

	// What the orchestrator reads back of it is the devices as sent.
	g := protocol.ParseGPUInfo(info)
	if g.Count != 2 || len(g.Devices) != 2 || g.Devices[1] != (protocol.GPUDevice{Index: 1, UUID: "GPU-1bb", Name: "NVIDIA H100 80GB HBM3", MemoryMiB: 81559}) {
		t.Errorf("parsed gpu_info %+v", g)
	}
}
