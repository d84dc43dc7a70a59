//go:build cgo

package gpu

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"
)

func testLogger(buf *bytes.Buffer) *slog.Logger {
	return slog.New(slog.NewTextHandler(buf, nil))
}

// mockServer is an 8-GPU DGX from go-nvml's mock package, with the telemetry calls
// the stock mock leaves unset filled in.
func mockServer() *dgxa100.Server {
	srv := dgxa100.New()
	for i, d := range srv.Devices {
		dev := d.(*dgxa100.Device)
		util := uint32(10 * i)
		dev.GetUtilizationRatesFunc = func() (nvml.Utilization, nvml.Return) {
			return nvml.Utilization{Gpu: util}, nvml.SUCCESS
		}
		dev.GetTemperatureFunc = func(nvml.TemperatureSensors) (uint32, nvml.Return) {
			return 40 + uint32(i), nvml.SUCCESS
		}
		dev.MemoryInfo.Used = uint64(i) << 30
	}
	return srv
}

func TestNVMLInventory(t *testing.T) {
	t.Parallel()
	srv := mockServer()
	for i, d := range srv.Devices {
		d.(*dgxa100.Device).Minor = 2*i + 1 // minor numbers need not follow the index
	}
	src := NewNVMLFrom(srv, testLogger(&bytes.Buffer{}))
	defer src.Close()

	inv, err := src.Inventory()
	if err != nil {
		t.Fatal(err)
	}
	if inv.Count != 8 || len(inv.Devices) != 8 {
		t.Fatalf("count = %d, devices = %d; want 8", inv.Count, len(inv.Devices))
	}
	if inv.Driver != "550.54.15" || inv.CUDAVersion != "12.4" {
		t.Errorf("driver %q cuda %q", inv.Driver, inv.CUDAVersion)
	}
	for i, d := range inv.Devices {
		want := srv.Devices[i].(*dgxa100.Device)
		if d.Index != i || d.UUID != want.UUID || d.Name != want.Name || d.MemoryMiB != 40960 {
			t.Errorf("device %d = %+v", i, d)
		}
		// The device node a job's cgroup allows or denies comes from the
		// minor number NVML reports, not from the index.
		if node := fmt.Sprintf("/dev/nvidia%d", want.Minor); d.DeviceNode != node {
			t.Errorf("device %d node %q, want %q", i, d.DeviceNode, node)
		}
	}

	info := inv.GPUInfo()
	if info.Count != 8 || info.Accelerator != "cuda" || info.Name != "Mock NVIDIA A100-SXM4-40GB" {
		t.Errorf("gpu info %+v", info)
	}
	if info.VRAMGB == nil || *info.VRAMGB != 40 {
		t.Errorf("vram_gb = %v; want 40", info.VRAMGB)
	}
	if len(info.Devices) != 8 {
		t.Errorf("devices in gpu_info: %d", len(info.Devices))
	}
	if got := inv.JobEnv(inv.Devices)["CUDA_VISIBLE_DEVICES"]; strings.Count(got, ",") != 7 || !strings.HasPrefix(got, "GPU-") {
		t.Errorf("CUDA_VISIBLE_DEVICES = %q", got)
	}
	// The wire form keeps upstream's key names.
	b, _ := json.Marshal(info)
	for _, k := range []string{`"name"`, `"vram_gb":40`, `"count":8`, `"accelerator":"cuda"`, `"driver"`} {
		if !bytes.Contains(b, []byte(k)) {
			t.Errorf("gpu_info JSON %s lacks %s", b, k)
		}
	}
}

func TestNVMLTelemetry(t *testing.T) {
	t.Parallel()
	src := NewNVMLFrom(mockServer(), testLogger(&bytes.Buffer{}))
	defer src.Close()
	tel, err := src.Telemetry()
	if err != nil {
		t.Fatal(err)
	}
	if len(tel) != 8 {
		t.Fatalf("telemetry for %d GPUs", len(tel))
	}
	if tel[3].UtilizationPct != 30 || tel[3].TemperatureC != 43 || tel[3].MemoryUsedMiB != 3072 || tel[3].UUID == "" {
		t.Errorf("gpu 3 telemetry %+v", tel[3])
	}
}

// A device that lacks a reading (the stock mock panics for unset methods, here the
// temperature) costs that reading, not the heartbeat or the worker.
func TestNVMLTelemetryUnsupported(t *testing.T) {
	t.Parallel()
	srv := dgxa100.New()
	for _, d := range srv.Devices {
		dev := d.(*dgxa100.Device)
		dev.GetUtilizationRatesFunc = func() (nvml.Utilization, nvml.Return) {
			return nvml.Utilization{}, nvml.ERROR_NOT_SUPPORTED
		}
	}
	var logs bytes.Buffer
	src := NewNVMLFrom(srv, testLogger(&logs))
	tel, err := src.Telemetry()
	if err != nil || len(tel) != 8 {
		t.Fatalf("telemetry %v, %v", tel, err)
	}
	if tel[0].UtilizationPct != 0 || tel[0].TemperatureC != 0 || tel[0].UUID == "" {
		t.Errorf("gpu 0 %+v", tel[0])
	}
	if !strings.Contains(logs.String(), "utilization") || !strings.Contains(logs.String(), "temperature") {
		t.Errorf("unsupported reading not logged: %s", logs.String())
	}
	if _, err := src.Inventory(); err != nil {
		t.Errorf("inventory after a telemetry failure: %v", err)
	}
}

func TestNVMLNoDriver(t *testing.T) {
	t.Parallel()
	var logs bytes.Buffer
	// A library path that cannot exist gives the real binding's no-driver path.
	src := NewNVMLFrom(nvml.New(nvml.WithLibraryPath("/nonexistent/libnvidia-ml.so.1")), testLogger(&logs))
	defer src.Close()
	inv, err := src.Inventory()
	if err != nil || inv.Count != 0 {
		t.Fatalf("inventory %+v, %v; want 0 GPUs", inv, err)
	}
	if !strings.Contains(logs.String(), "no NVIDIA driver found") || !strings.Contains(logs.String(), "reporting 0 GPUs") {
		t.Errorf("log = %q", logs.String())
	}
	info := inv.GPUInfo()
	if info.Count != 0 || info.Accelerator != "" || info.VRAMGB != nil {
		t.Errorf("gpu info %+v", info)
	}
	b, _ := json.Marshal(info)
	if !bytes.Contains(b, []byte(`"vram_gb":null`)) {
		t.Errorf("gpu_info JSON %s", b)
	}
	if tel, err := src.Telemetry(); err != nil || len(tel) != 0 {
		t.Errorf("telemetry %v %v", tel, err)
	}
}

func TestInitFailure(t *testing.T) {
	t.Parallel()
	srv := dgxa100.New()
	srv.InitFunc = func() nvml.Return { return nvml.ERROR_DRIVER_NOT_LOADED }
	var logs bytes.Buffer
	src := NewNVMLFrom(srv, testLogger(&logs))
	if inv, _ := src.Inventory(); inv.Count != 0 {
		t.Errorf("count %d", inv.Count)
	}
	if !strings.Contains(logs.String(), "no NVIDIA driver found") {
		t.Errorf("log = %q", logs.String())
	}
}

// The system library: on this machine usually absent; either way it must not panic.
func TestNewNVMLSystem(t *testing.T) {
	src := NewNVML(testLogger(&bytes.Buffer{}))
	defer src.Close()
	if _, err := src.Inventory(); err != nil {
		t.Logf("inventory error (acceptable): %v", err)
	}
}
