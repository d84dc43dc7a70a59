// Package gpu describes the accelerators of the machine simpletuner-workerd runs on:
// a static inventory reported at registration and live telemetry sent with each
// heartbeat. NVML (through github.com/NVIDIA/go-nvml) is the only real backend; a
// machine without the NVIDIA driver reports zero GPUs instead of failing.
package gpu

import (
	"math"
	"strconv"

	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
)

// Device is one GPU as found at startup.
type Device struct {
	Index     int    `json:"index"`
	UUID      string `json:"uuid"`
	Name      string `json:"name"`
	MemoryMiB uint64 `json:"memory_mib"`
}

// Inventory is what the machine has; it does not change while the daemon runs.
type Inventory struct {
	Count       int      `json:"count"`
	Driver      string   `json:"driver,omitempty"`
	CUDAVersion string   `json:"cuda_version,omitempty"`
	Devices     []Device `json:"devices"`
}

// Telemetry is one GPU's live numbers (the heartbeat's gpus entries).
type Telemetry = protocol.GPUTelemetry

// Source yields the inventory and telemetry. Implementations are safe for
// concurrent use.
type Source interface {
	Inventory() (Inventory, error)
	Telemetry() ([]protocol.GPUTelemetry, error)
	Close() error
}

// GPUInfo converts the inventory into the registration's gpu_info. vram_gb is the
// first device's memory in GiB rounded to one decimal, as upstream's nvidia-smi path
// computes it; with no GPU it is null and accelerator is empty.
func (inv Inventory) GPUInfo() protocol.GPUInfo {
	info := protocol.GPUInfo{
		Count:       inv.Count,
		Driver:      inv.Driver,
		CUDAVersion: inv.CUDAVersion,
	}
	if inv.Count == 0 || len(inv.Devices) == 0 {
		return info
	}
	first := inv.Devices[0]
	info.Name = first.Name
	vram := math.Round(float64(first.MemoryMiB)/1024*10) / 10
	info.VRAMGB = &vram
	info.Accelerator = "cuda"
	for _, d := range inv.Devices {
		info.Devices = append(info.Devices, protocol.GPUDevice{
			Index: d.Index, UUID: d.UUID, Name: d.Name, MemoryMiB: d.MemoryMiB,
		})
	}
	return info
}

// VisibleDevices is the value for CUDA_VISIBLE_DEVICES naming every GPU of the
// inventory: UUIDs where known (stable across PCI renumbering), else indices.
// It is "" when there is no GPU.
func (inv Inventory) VisibleDevices() string {
	var out []byte
	for i, d := range inv.Devices {
		if i > 0 {
			out = append(out, ',')
		}
		if d.UUID != "" {
			out = append(out, d.UUID...)
		} else {
			out = strconv.AppendInt(out, int64(d.Index), 10)
		}
	}
	return string(out)
}

type none struct{}

// None returns a Source with no GPUs (gpu.backend = "none").
func None() Source { return none{} }

func (none) Inventory() (Inventory, error)               { return Inventory{Devices: []Device{}}, nil }
func (none) Telemetry() ([]protocol.GPUTelemetry, error) { return nil, nil }
func (none) Close() error                                { return nil }
