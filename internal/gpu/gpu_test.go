package gpu

import (
	"maps"
	"testing"

	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
)

func TestGPUInfoRounding(t *testing.T) {
	t.Parallel()
	inv := Inventory{Count: 2, Driver: "550", Devices: []Device{
		{GPUDevice: protocol.GPUDevice{Index: 0, Name: "NVIDIA H100 80GB HBM3", MemoryMiB: 81559}},
		{GPUDevice: protocol.GPUDevice{Index: 1, Name: "NVIDIA H100 80GB HBM3", MemoryMiB: 81559}},
	}}
	info := inv.GPUInfo()
	if info.VRAMGB == nil || *info.VRAMGB != 79.6 {
		t.Errorf("vram_gb = %v; want 79.6", info.VRAMGB)
	}
	if got := inv.JobEnv(inv.Devices)["CUDA_VISIBLE_DEVICES"]; got != "0,1" {
		t.Errorf("visible devices %q", got)
	}
}

// A job is told its own GPUs only: by UUID for NVIDIA (index where no UUID
// is known), by index for AMD; a job given no GPU sees an empty list.
func TestJobEnv(t *testing.T) {
	t.Parallel()
	nv := Inventory{Devices: []Device{{GPUDevice: protocol.GPUDevice{Index: 0, UUID: "GPU-a"}}, {GPUDevice: protocol.GPUDevice{Index: 1}}, {GPUDevice: protocol.GPUDevice{Index: 2, UUID: "GPU-c"}}}}
	for _, tt := range []struct {
		inv  Inventory
		devs []Device
		want map[string]string
	}{
		{nv, nv.Devices[1:], map[string]string{"CUDA_VISIBLE_DEVICES": "1,GPU-c", "NVIDIA_VISIBLE_DEVICES": "1,GPU-c"}},
		{nv, nil, map[string]string{"CUDA_VISIBLE_DEVICES": "", "NVIDIA_VISIBLE_DEVICES": ""}},
		{Inventory{Vendor: VendorAMD}, []Device{{GPUDevice: protocol.GPUDevice{Index: 3, UUID: "x"}}, {GPUDevice: protocol.GPUDevice{Index: 5}}}, map[string]string{"ROCR_VISIBLE_DEVICES": "3,5", "HIP_VISIBLE_DEVICES": "3,5"}},
	} {
		if got := tt.inv.JobEnv(tt.devs); !maps.Equal(got, tt.want) {
			t.Errorf("JobEnv(%v) = %v, want %v", tt.devs, got, tt.want)
		}
	}
}

func TestStatic(t *testing.T) {
	t.Parallel()
	inv, err := NewStatic(VendorAMD, []Device{{GPUDevice: protocol.GPUDevice{Name: "MI300X", MemoryMiB: 192 << 10}}, {GPUDevice: protocol.GPUDevice{Name: "MI300X", MemoryMiB: 192 << 10}, DeviceNode: "/dev/dri/renderD129"}}).Inventory()
	if err != nil || inv.Count != 2 || inv.Devices[1].Index != 1 || inv.Devices[1].DeviceNode != "/dev/dri/renderD129" {
		t.Fatalf("%+v %v", inv, err)
	}
	if info := inv.GPUInfo(); info.Accelerator != "rocm" || *info.VRAMGB != 192 || len(info.Devices) != 2 {
		t.Errorf("gpu info %+v", info)
	}
}

func TestNone(t *testing.T) {
	t.Parallel()
	inv, err := None().Inventory()
	if err != nil || inv.Count != 0 || len(inv.Devices) != 0 {
		t.Fatalf("%+v %v", inv, err)
	}
}
