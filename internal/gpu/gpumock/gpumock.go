//go:build cgo

// Package gpumock is a machine of NVIDIA GPUs for tests, built on go-nvml's
// mock: GPUs with live numbers, compute processes, health counters and
// driver error events that a test sets and injects, behind the same
// nvml.Interface the real driver offers. It is for tests only.
package gpumock

import (
	"sync"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"
)

// Machine is n mock GPUs (1 to 8). Its zero state is healthy and idle.
type Machine struct {
	*dgxa100.Server
	n int

	mu     sync.Mutex
	gpus   []*state
	events chan nvml.EventData
}

type state struct {
	util      uint32
	usedBytes uint64
	procs     []nvml.ProcessInfo
	ecc       uint64
	lost      bool
	remapFail bool
	reasons   uint64
}

// New makes a machine of n GPUs.
func New(n int) *Machine {
	m := &Machine{Server: dgxa100.New(), n: n, events: make(chan nvml.EventData, 64)}
	m.DeviceGetCountFunc = func() (int, nvml.Return) { return n, nvml.SUCCESS }
	m.EventSetCreateFunc = func() (nvml.EventSet, nvml.Return) {
		return &mock.EventSet{
			WaitFunc: func(timeoutMs uint32) (nvml.EventData, nvml.Return) {
				select {
				case ev := <-m.events:
					return ev, nvml.SUCCESS
				case <-time.After(time.Duration(timeoutMs) * time.Millisecond):
					return nvml.EventData{}, nvml.ERROR_TIMEOUT
				}
			},
			FreeFunc: func() nvml.Return { return nvml.SUCCESS },
		}, nvml.SUCCESS
	}
	for i := range n {
		s := &state{}
		m.gpus = append(m.gpus, s)
		d := m.Devices[i].(*dgxa100.Device)
		i := i
		read := func(f func(*state)) nvml.Return {
			m.mu.Lock()
			defer m.mu.Unlock()
			if m.gpus[i].lost {
				return nvml.ERROR_GPU_IS_LOST
			}
			f(m.gpus[i])
			return nvml.SUCCESS
		}
		d.GetUtilizationRatesFunc = func() (u nvml.Utilization, ret nvml.Return) {
			ret = read(func(s *state) { u.Gpu = s.util })
			return
		}
		d.GetMemoryInfoFunc = func() (mem nvml.Memory, ret nvml.Return) {
			ret = read(func(s *state) { mem = nvml.Memory{Total: d.MemoryInfo.Total, Used: s.usedBytes} })
			return
		}
		d.GetTemperatureFunc = func(nvml.TemperatureSensors) (uint32, nvml.Return) { return 45, read(func(*state) {}) }
		d.GetPowerUsageFunc = func() (uint32, nvml.Return) { return 250_000, read(func(*state) {}) }
		d.GetComputeRunningProcessesFunc = func() (ps []nvml.ProcessInfo, ret nvml.Return) {
			ret = read(func(s *state) { ps = append(ps, s.procs...) })
			return
		}
		d.GetTotalEccErrorsFunc = func(nvml.MemoryErrorType, nvml.EccCounterType) (n uint64, ret nvml.Return) {
			ret = read(func(s *state) { n = s.ecc })
			return
		}
		d.GetRemappedRowsFunc = func() (corr, unc int, pending, failed bool, ret nvml.Return) {
			ret = read(func(s *state) { failed = s.remapFail })
			return
		}
		d.GetCurrentClocksEventReasonsFunc = func() (r uint64, ret nvml.Return) {
			ret = read(func(s *state) { r = s.reasons })
			return
		}
		d.GetSupportedEventTypesFunc = func() (uint64, nvml.Return) {
			return nvml.EventTypeXidCriticalError | nvml.EventTypeDoubleBitEccError | nvml.EventTypeSingleBitEccError, nvml.SUCCESS
		}
		d.RegisterEventsFunc = func(uint64, nvml.EventSet) nvml.Return { return nvml.SUCCESS }
	}
	return m
}

// UUID is the UUID of GPU i.
func (m *Machine) UUID(i int) string { return m.Devices[i].(*dgxa100.Device).UUID }

func (m *Machine) set(i int, f func(*state)) {
	m.mu.Lock()
	defer m.mu.Unlock()
	f(m.gpus[i])
}

// SetUse sets GPU i's utilisation (percent) and memory in use.
func (m *Machine) SetUse(i int, utilPct uint32, usedBytes uint64) {
	m.set(i, func(s *state) { s.util, s.usedBytes = utilPct, usedBytes })
}

// SetProcesses sets the compute processes on GPU i (pid → bytes).
func (m *Machine) SetProcesses(i int, procs map[int]uint64) {
	m.set(i, func(s *state) {
		s.procs = nil
		for pid, b := range procs {
			s.procs = append(s.procs, nvml.ProcessInfo{Pid: uint32(pid), UsedGpuMemory: b})
		}
	})
}

// AddECC counts n more uncorrectable ECC errors on GPU i.
func (m *Machine) AddECC(i int, n uint64) { m.set(i, func(s *state) { s.ecc += n }) }

// Lose makes GPU i fall off the bus: every call on it fails as lost.
func (m *Machine) Lose(i int) { m.set(i, func(s *state) { s.lost = true }) }

// FailRemap makes GPU i report a row-remapping failure.
func (m *Machine) FailRemap(i int) { m.set(i, func(s *state) { s.remapFail = true }) }

// SetClockEventReasons sets GPU i's clock event reasons (NVML's bits).
func (m *Machine) SetClockEventReasons(i int, r uint64) { m.set(i, func(s *state) { s.reasons = r }) }

// XID raises XID xid on GPU i, as the driver's event would.
func (m *Machine) XID(i int, xid uint64) {
	m.events <- nvml.EventData{Device: m.Devices[i], EventType: nvml.EventTypeXidCriticalError, EventData: xid}
}
