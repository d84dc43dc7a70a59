package gpu

import "github.com/simpletuner/simpletuner-orchestration/internal/protocol"

// static is an inventory written in the configuration ([gpu] backend =
// "static"): accelerators NVML cannot see, or a fleet of many-GPU workers on
// a test machine. It reports no telemetry.
type static struct {
	Unwatched
	inv Inventory
}

// NewStatic returns a Source holding devs, indexed in order from 0.
func NewStatic(vendor string, devs []Device) Source {
	inv := Inventory{Vendor: vendor, Count: len(devs), Devices: make([]Device, len(devs))}
	for i, d := range devs {
		d.Index = i
		inv.Devices[i] = d
	}
	return static{inv: inv}
}

func (s static) Inventory() (Inventory, error)             { return s.inv, nil }
func (static) Telemetry() ([]protocol.GPUTelemetry, error) { return nil, nil }
func (static) Close() error                                { return nil }
