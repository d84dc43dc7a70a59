//go:build cgo

package gpu

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
)

// NewNVML opens the system's NVML (libnvidia-ml.so.1, loaded with dlopen). Without
// the driver it logs once and returns a Source reporting zero GPUs: a worker on a
// machine without GPUs still registers, it just matches no GPU job.
func NewNVML(log *slog.Logger) Source {
	return NewNVMLFrom(nvml.New(), log)
}

// NewNVMLFrom is NewNVML over any nvml.Interface (tests pass the go-nvml mock).
func NewNVMLFrom(lib nvml.Interface, log *slog.Logger) Source {
	if log == nil {
		log = slog.Default()
	}
	if err := call(func() error { return nvmlErr(lib.Init()) }); err != nil {
		if errors.Is(err, nvml.ERROR_LIBRARY_NOT_FOUND) || errors.Is(err, nvml.ERROR_DRIVER_NOT_LOADED) {
			log.Warn(fmt.Sprintf("no NVIDIA driver found (%v): reporting 0 GPUs", err))
		} else {
			log.Warn(fmt.Sprintf("NVML initialisation failed (%v): reporting 0 GPUs", err))
		}
		return None()
	}
	return &nvmlSource{lib: lib, log: log}
}

type nvmlSource struct {
	lib nvml.Interface
	log *slog.Logger

	mu     sync.Mutex
	closed bool
	inv    *Inventory // cached: the hardware does not change under a running daemon
	warned map[string]bool
}

func (s *nvmlSource) Inventory() (Inventory, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return Inventory{}, errors.New("gpu: NVML source is closed")
	}
	if s.inv != nil {
		return *s.inv, nil
	}
	var inv Inventory
	err := call(func() error {
		var err error
		inv, err = s.inventory()
		return err
	})
	if err != nil {
		return Inventory{}, err
	}
	s.inv = &inv
	return inv, nil
}

func (s *nvmlSource) inventory() (Inventory, error) {
	inv := Inventory{Vendor: VendorNVIDIA, Devices: []Device{}}
	if v, ret := s.lib.SystemGetDriverVersion(); ret == nvml.SUCCESS {
		inv.Driver = v
	}
	if v, ret := s.lib.SystemGetCudaDriverVersion(); ret == nvml.SUCCESS && v > 0 {
		inv.CUDAVersion = fmt.Sprintf("%d.%d", v/1000, v%1000/10)
	}
	n, ret := s.lib.DeviceGetCount()
	if err := nvmlErr(ret); err != nil {
		return Inventory{}, fmt.Errorf("gpu: counting devices: %w", err)
	}
	for i := 0; i < n; i++ {
		dev, ret := s.lib.DeviceGetHandleByIndex(i)
		if err := nvmlErr(ret); err != nil {
			return Inventory{}, fmt.Errorf("gpu: device %d: %w", i, err)
		}
		d := Device{Index: i}
		if v, ret := dev.GetUUID(); ret == nvml.SUCCESS {
			d.UUID = v
		}
		if v, ret := dev.GetName(); ret == nvml.SUCCESS {
			d.Name = v
		}
		if m, ret := dev.GetMemoryInfo(); ret == nvml.SUCCESS {
			d.MemoryMiB = m.Total / (1 << 20)
		}
		if minor, ret := dev.GetMinorNumber(); ret == nvml.SUCCESS {
			d.DeviceNode = fmt.Sprintf("/dev/nvidia%d", minor)
		}
		inv.Devices = append(inv.Devices, d)
	}
	inv.Count = len(inv.Devices)
	return inv, nil
}

// Telemetry reads utilisation, memory and temperature per GPU. A reading a device
// does not support is left at zero (and logged once), never an error.
func (s *nvmlSource) Telemetry() ([]protocol.GPUTelemetry, error) {
	inv, err := s.Inventory()
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, errors.New("gpu: NVML source is closed")
	}
	out := make([]protocol.GPUTelemetry, 0, len(inv.Devices))
	err = call(func() error {
		for _, d := range inv.Devices {
			dev, ret := s.lib.DeviceGetHandleByIndex(d.Index)
			if err := nvmlErr(ret); err != nil {
				return fmt.Errorf("gpu: device %d: %w", d.Index, err)
			}
			t := protocol.GPUTelemetry{UUID: d.UUID}
			s.read("utilization", func() nvml.Return {
				u, ret := dev.GetUtilizationRates()
				t.UtilizationPct = float64(u.Gpu)
				return ret
			})
			s.read("memory", func() nvml.Return {
				m, ret := dev.GetMemoryInfo()
				t.MemoryUsedMiB = m.Used / (1 << 20)
				return ret
			})
			s.read("temperature", func() nvml.Return {
				c, ret := dev.GetTemperature(nvml.TEMPERATURE_GPU)
				t.TemperatureC = float64(c)
				return ret
			})
			out = append(out, t)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// read takes one reading; when it fails (or panics) the value stays zero and the
// failure is logged once per kind of reading.
func (s *nvmlSource) read(what string, f func() nvml.Return) {
	err := call(func() error { return nvmlErr(f()) })
	if err == nil {
		return
	}
	if s.warned == nil {
		s.warned = map[string]bool{}
	}
	if !s.warned[what] {
		s.warned[what] = true
		s.log.Warn("GPU telemetry unavailable", "reading", what, "err", err)
	}
}

func (s *nvmlSource) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	return call(func() error { return nvmlErr(s.lib.Shutdown()) })
}

// nvmlErr turns an NVML return code into an error (nil on success).
func nvmlErr(ret nvml.Return) error {
	if ret == nvml.SUCCESS {
		return nil
	}
	return ret
}

// call runs f and turns a panic into an error: a driver/binding mismatch (or a mock
// missing a method) must cost the worker its GPU numbers, not its life.
func call(f func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("gpu: NVML call panicked: %v", r)
		}
	}()
	return f()
}
