//go:build cgo

package gpu

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"sync"
	"time"

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
	return &nvmlSource{lib: lib, log: log, stop: make(chan struct{})}
}

type nvmlSource struct {
	lib nvml.Interface
	log *slog.Logger

	mu     sync.Mutex
	closed bool
	inv    *Inventory // cached: the hardware does not change under a running daemon
	warned map[string]bool
	// events are the goroutines waiting on event sets: Close waits for them
	// to leave NVML before shutting it down.
	events sync.WaitGroup
	stop   chan struct{}
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
		d := Device{GPUDevice: protocol.GPUDevice{Index: i}}
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
			t := protocol.GPUTelemetry{Index: d.Index, UUID: d.UUID}
			s.read("utilization", func() nvml.Return {
				u, ret := dev.GetUtilizationRates()
				t.UtilizationPct = float64(u.Gpu)
				return ret
			})
			s.read("memory", func() nvml.Return {
				m, ret := dev.GetMemoryInfo()
				t.MemoryUsedMiB, t.MemoryTotalMiB = m.Used/(1<<20), m.Total/(1<<20)
				return ret
			})
			s.read("temperature", func() nvml.Return {
				c, ret := dev.GetTemperature(nvml.TEMPERATURE_GPU)
				t.TemperatureC = float64(c)
				return ret
			})
			s.read("power", func() nvml.Return {
				mw, ret := dev.GetPowerUsage()
				t.PowerW = float64(mw) / 1000
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
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	close(s.stop)
	s.mu.Unlock()
	s.events.Wait()
	return call(func() error { return nvmlErr(s.lib.Shutdown()) })
}

// eachDevice calls f with each device's handle, under the source's lock; a
// device whose handle cannot be had is passed as nil with the error.
func (s *nvmlSource) eachDevice(f func(d Device, dev nvml.Device, err error)) error {
	inv, err := s.Inventory()
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errors.New("gpu: NVML source is closed")
	}
	for _, d := range inv.Devices {
		var dev nvml.Device
		err := call(func() error {
			var ret nvml.Return
			dev, ret = s.lib.DeviceGetHandleByIndex(d.Index)
			return nvmlErr(ret)
		})
		f(d, dev, err)
	}
	return nil
}

// Processes lists each GPU's compute processes and the memory they hold.
func (s *nvmlSource) Processes() (map[int][]Process, error) {
	out := map[int][]Process{}
	var failed error
	err := s.eachDevice(func(d Device, dev nvml.Device, err error) {
		if err == nil {
			err = call(func() error {
				ps, ret := dev.GetComputeRunningProcesses()
				for _, p := range ps {
					used := p.UsedGpuMemory
					if used == math.MaxUint64 { // the driver cannot say (MIG, no privilege)
						used = 0
					}
					out[d.Index] = append(out[d.Index], Process{PID: int(p.Pid), UsedBytes: used})
				}
				return nvmlErr(ret)
			})
		}
		if err != nil && failed == nil {
			failed = fmt.Errorf("gpu: processes on GPU %d: %w", d.Index, err)
		}
	})
	if err != nil {
		return nil, err
	}
	return out, failed
}

// Health reads what tells a failing GPU from a healthy one: whether it
// still answers, its uncorrectable ECC errors, row remapping and hardware
// slowdowns.
func (s *nvmlSource) Health() ([]Reading, error) {
	var out []Reading
	err := s.eachDevice(func(d Device, dev nvml.Device, err error) {
		r := Reading{Index: d.Index, UUID: d.UUID}
		lost := func(ret nvml.Return) nvml.Return {
			r.Lost = r.Lost || ret == nvml.ERROR_GPU_IS_LOST
			return ret
		}
		if err != nil {
			r.Lost = errors.Is(err, nvml.ERROR_GPU_IS_LOST)
			out = append(out, r)
			return
		}
		s.read("ecc", func() nvml.Return {
			n, ret := dev.GetTotalEccErrors(nvml.MEMORY_ERROR_TYPE_UNCORRECTED, nvml.VOLATILE_ECC)
			r.UncorrectableECC, r.ECC = n, ret == nvml.SUCCESS
			return lost(ret)
		})
		s.read("remapped rows", func() nvml.Return {
			_, _, pending, failure, ret := dev.GetRemappedRows()
			r.RemapPending, r.RemapFailed = pending, failure
			return lost(ret)
		})
		s.read("clock event reasons", func() nvml.Return {
			reasons, ret := dev.GetCurrentClocksEventReasons()
			r.Slowdown = slowdown(reasons)
			return lost(ret)
		})
		out = append(out, r)
	})
	return out, err
}

// slowdown names the hardware slowdowns among NVML's clock event reasons.
func slowdown(reasons uint64) string {
	var names []string
	for _, b := range []struct {
		bit  uint64
		name string
	}{
		{nvml.ClocksThrottleReasonHwThermalSlowdown, "thermal"},
		{nvml.ClocksThrottleReasonHwPowerBrakeSlowdown, "power brake"},
		{nvml.ClocksThrottleReasonHwSlowdown, "hardware"},
	} {
		if reasons&b.bit != 0 {
			names = append(names, b.name)
		}
	}
	return strings.Join(names, ", ")
}

// eventWait is how long one wait on the event set lasts: the longest a
// closing source waits for the watching goroutine.
const eventWait = 500 // ms

// Events registers for XIDs and uncorrectable ECC errors on every GPU that
// supports them and delivers them until ctx ends or the source closes.
func (s *nvmlSource) Events(ctx context.Context) <-chan Event {
	inv, err := s.Inventory()
	if err != nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	var set nvml.EventSet
	if err := call(func() error {
		var ret nvml.Return
		set, ret = s.lib.EventSetCreate()
		return nvmlErr(ret)
	}); err != nil {
		s.log.Warn("GPU error events unavailable: XIDs are not watched", "err", err)
		return nil
	}
	byUUID := map[string]int{}
	registered := 0
	for _, d := range inv.Devices {
		byUUID[d.UUID] = d.Index
		err := call(func() error {
			dev, ret := s.lib.DeviceGetHandleByIndex(d.Index)
			if ret != nvml.SUCCESS {
				return nvmlErr(ret)
			}
			supported, ret := dev.GetSupportedEventTypes()
			if ret != nvml.SUCCESS {
				return nvmlErr(ret)
			}
			return nvmlErr(dev.RegisterEvents(supported&(nvml.EventTypeXidCriticalError|nvml.EventTypeDoubleBitEccError), set))
		})
		if err != nil {
			s.log.Warn("GPU error events unavailable on this GPU", "index", d.Index, "uuid", d.UUID, "err", err)
			continue
		}
		registered++
	}
	if registered == 0 {
		_ = call(func() error { return nvmlErr(set.Free()) })
		return nil
	}
	out := make(chan Event, 16)
	s.events.Add(1)
	go func() {
		defer s.events.Done()
		defer close(out)
		defer func() { _ = call(func() error { return nvmlErr(set.Free()) }) }()
		for ctx.Err() == nil {
			select {
			case <-s.stop:
				return
			default:
			}
			var data nvml.EventData
			var ret nvml.Return
			if err := call(func() error { data, ret = set.Wait(eventWait); return nil }); err != nil {
				s.log.Warn("waiting for GPU error events failed; XIDs are no longer watched", "err", err)
				return
			}
			ev, ok := s.event(data, ret, byUUID)
			if !ok {
				if ret != nvml.SUCCESS && ret != nvml.ERROR_TIMEOUT {
					// Not a timeout: do not spin on a broken set.
					select {
					case <-time.After(time.Second):
					case <-ctx.Done():
					case <-s.stop:
					}
				}
				continue
			}
			select {
			case out <- ev:
			case <-ctx.Done():
				return
			case <-s.stop:
				return
			}
		}
	}()
	return out
}

// event turns what a wait returned into an Event; ok is false when there is
// nothing to deliver.
func (s *nvmlSource) event(data nvml.EventData, ret nvml.Return, byUUID map[string]int) (Event, bool) {
	ev := Event{Index: -1, At: time.Now()}
	switch ret {
	case nvml.SUCCESS:
	case nvml.ERROR_GPU_IS_LOST:
		ev.Lost = true
		return ev, true
	default:
		return ev, false
	}
	if data.Device != nil {
		_ = call(func() error {
			if uuid, ret := data.Device.GetUUID(); ret == nvml.SUCCESS {
				if i, ok := byUUID[uuid]; ok {
					ev.Index, ev.UUID = i, uuid
				}
			}
			return nil
		})
	}
	switch {
	case data.EventType&nvml.EventTypeXidCriticalError != 0:
		ev.XID = data.EventData
	case data.EventType&nvml.EventTypeDoubleBitEccError != 0:
		ev.ECC = true
	default:
		return ev, false
	}
	return ev, true
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
