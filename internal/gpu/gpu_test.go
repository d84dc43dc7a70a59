package gpu

import "testing"

func TestGPUInfoRounding(t *testing.T) {
	t.Parallel()
	inv := Inventory{Count: 2, Driver: "550", Devices: []Device{
		{Index: 0, Name: "NVIDIA H100 80GB HBM3", MemoryMiB: 81559},
		{Index: 1, Name: "NVIDIA H100 80GB HBM3", MemoryMiB: 81559},
	}}
	info := inv.GPUInfo()
	if info.VRAMGB == nil || *info.VRAMGB != 79.6 {
		t.Errorf("vram_gb = %v; want 79.6", info.VRAMGB)
	}
	if got := inv.VisibleDevices(); got != "0,1" {
		t.Errorf("visible devices %q", got)
	}
}

func TestNone(t *testing.T) {
	t.Parallel()
	inv, err := None().Inventory()
	if err != nil || inv.Count != 0 || inv.VisibleDevices() != "" {
		t.Fatalf("%+v %v", inv, err)
	}
}
