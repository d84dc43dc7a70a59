// Package gpu describes the accelerators of the machine simpletuner-workerd runs on:
// a static inventory reported at registration and live telemetry sent with each
// heartbeat. NVML (through github.com/NVIDIA/go-nvml) is the only real backend; a
// machine without the NVIDIA driver reports zero GPUs instead of failing.
package gpu

import (
	"math"
	"strconv"
	"strings"

	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
)

// Device is one GPU as found at startup: the record the worker reports of
// it (gpu_info's devices) and what only the worker needs besides.
type Device struct {
	protocol.GPUDevice
	// DeviceNode is the device file jobs open to use the GPU (/dev/nvidia3);
	// "" when unknown. A job's cgroup lets it open only its own GPUs' files.
	DeviceNode string `json:"device_node,omitempty"`
}

// Vendors: how jobs are told their GPUs.
const (
	VendorNVIDIA = "nvidia"
	VendorAMD    = "amd"
)

// Inventory is what the machine has; it does not change while the daemon runs.
type Inventory struct {
	Vendor      string   `json:"vendor,omitempty"` // "" is nvidia
	Count       int      `json:"count"`
	Driver      string   `json:"driver,omitempty"`
	CUDAVersion string   `json:"cuda_version,omitempty"`
	Devices     []Device `json:"devices"`
}

// Telemetry is one GPU's live numbers (the heartbeat's gpus entries).
type Telemetry = protocol.GPUTelemetry

// Source yields the inventory and telemetry, and watches the GPUs' health.
// Implementations are safe for concurrent use.
type Source interface {
	Inventory() (Inventory, error)
	Telemetry() ([]protocol.GPUTelemetry, error)
	Watcher
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
	if inv.Vendor == VendorAMD {
		info.Accelerator = "rocm"
	}
	for _, d := range inv.Devices {
		info.Devices = append(info.Devices, d.GPUDevice)
	}
	return info
}

// JobEnv is the environment that tells a job which GPUs are its: for NVIDIA,
// CUDA_VISIBLE_DEVICES and NVIDIA_VISIBLE_DEVICES by UUID where known (stable
// across PCI renumbering), else by index; for AMD, ROCR_VISIBLE_DEVICES and
// HIP_VISIBLE_DEVICES by index. No device: the variables are set empty, so a
// job given no GPU sees none.
func (inv Inventory) JobEnv(devs []Device) map[string]string {
	ids := make([]string, len(devs))
	indices := make([]string, len(devs))
	for i, d := range devs {
		indices[i] = strconv.Itoa(d.Index)
		ids[i] = indices[i]
		if d.UUID != "" {
			ids[i] = d.UUID
		}
	}
	if inv.Vendor == VendorAMD {
		v := strings.Join(indices, ",")
		return map[string]string{"ROCR_VISIBLE_DEVICES": v, "HIP_VISIBLE_DEVICES": v}
	}
	v := strings.Join(ids, ",")
	return map[string]string{"CUDA_VISIBLE_DEVICES": v, "NVIDIA_VISIBLE_DEVICES": v}
}

// Device returns the device with the worker's index i.
func (inv Inventory) Device(i int) (Device, bool) {
	for _, d := range inv.Devices {
		if d.Index == i {
			return d, true
		}
	}
	return Device{}, false
}

type none struct{ Unwatched }

// None returns a Source with no GPUs (gpu.backend = "none").
func None() Source { return none{} }

func (none) Inventory() (Inventory, error)               { return Inventory{Devices: []Device{}}, nil }
func (none) Telemetry() ([]protocol.GPUTelemetry, error) { return nil, nil }
func (none) Close() error                                { return nil }
