package protocol

import (
	"encoding/json"
	"math"
	"strconv"
)

// GPUSummary is a worker's reported gpu_info read in either spelling:
// upstream's agent sends {name, vram_gb, count, accelerator}, or
// the names SimpleTuner's guides use (gpu_name, gpu_vram_gb, gpu_count,
// accelerator_type); simpletuner-workerd adds devices.
type GPUSummary struct {
	Count       int
	Name        string
	VRAMGB      float64
	Accelerator string
	// Devices are the GPUs one by one: as reported, or, for an agent that
	// reports only a count, indices 0…count-1 each with VRAMGB.
	Devices []GPUDevice
}

// ParseGPUInfo reads a worker's gpu_info; anything unreadable is no GPU.
func ParseGPUInfo(raw json.RawMessage) GPUSummary {
	var m map[string]any
	if len(raw) == 0 || json.Unmarshal(raw, &m) != nil {
		return GPUSummary{}
	}
	num := func(keys ...string) float64 {
		for _, k := range keys {
			if f, ok := m[k].(float64); ok && !math.IsNaN(f) {
				return f
			}
		}
		return 0
	}
	str := func(keys ...string) string {
		for _, k := range keys {
			if s, ok := m[k].(string); ok {
				return s
			}
		}
		return ""
	}
	g := GPUSummary{
		Count:       max(int(num("count", "gpu_count")), 0),
		Name:        str("name", "gpu_name"),
		VRAMGB:      num("vram_gb", "gpu_vram_gb"),
		Accelerator: str("accelerator", "accelerator_type"),
	}
	if devs := ReportedDevices(raw); len(devs) > 0 {
		g.Devices = devs
		g.Count = len(g.Devices)
		return g
	}
	for i := range min(g.Count, 1024) {
		g.Devices = append(g.Devices, GPUDevice{Index: i, Name: g.Name, MemoryMiB: uint64(g.VRAMGB * 1024)})
	}
	return g
}

// ReportedDevices are the GPUs gpu_info lists one by one (simpletuner-workerd
// lists them; SimpleTuner's own agent reports a count only): none when it
// lists none or is unreadable. ParseGPUInfo adds devices for a bare count.
func ReportedDevices(raw json.RawMessage) []GPUDevice {
	var withDevices struct {
		Devices []GPUDevice `json:"devices"`
	}
	if len(raw) == 0 || json.Unmarshal(raw, &withDevices) != nil {
		return nil
	}
	return withDevices.Devices
}

// VRAMGB is the device's memory in GiB.
func (d GPUDevice) VRAMGB() float64 { return float64(d.MemoryMiB) / 1024 }

// AssignedGPUs names the GPUs of indices for job_submit's gpus: index and,
// where the worker reported one, UUID. An empty list (a job that takes no
// GPU) stays a list.
func (g GPUSummary) AssignedGPUs(indices []int) *[]AssignedGPU {
	out := make([]AssignedGPU, 0, len(indices))
	for _, i := range indices {
		a := AssignedGPU{Index: i}
		for _, d := range g.Devices {
			if d.Index == i {
				a.UUID = d.UUID
			}
		}
		out = append(out, a)
	}
	return &out
}

// GPUAllocation says in words what GPUs a job gets: "whole worker", "no GPU
// (CPU only)", "1 GPU", "4 GPUs".
func GPUAllocation(count int, whole bool) string {
	switch {
	case whole:
		return "whole worker"
	case count == 0:
		return "no GPU (CPU only)"
	case count == 1:
		return "1 GPU"
	}
	return strconv.Itoa(count) + " GPUs"
}
