package gpu

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// Process is a compute process on a GPU, as the driver lists it.
type Process struct {
	PID int
	// UsedBytes is the GPU memory it holds; 0 when the driver cannot say.
	UsedBytes uint64
}

// Reading is what a health check reads of one GPU. A reading the device
// does not support is left at its zero value.
type Reading struct {
	Index int
	UUID  string
	// Lost: the GPU no longer answers; it fell off the bus.
	Lost bool
	// UncorrectableECC is the volatile count of uncorrectable (double-bit)
	// ECC errors, valid with ECC.
	UncorrectableECC uint64
	ECC              bool
	// RemapFailed: the memory has rows it could not remap (the GPU must be
	// serviced); RemapPending: a remap waits for the next GPU reset.
	RemapFailed, RemapPending bool
	// Slowdown names the hardware slowdowns in force ("thermal", "power
	// brake", "hardware"); "" when none.
	Slowdown string
}

// Fault says what hardware fault this reading shows against the reading
// base taken when the GPU was last known healthy; "" when none. A fault
// fences the GPU until an admin clears it.
func (r Reading) Fault(base Reading) string {
	switch {
	case r.Lost:
		return "lost from the bus (the driver reports the GPU as lost)"
	case r.ECC && base.ECC && r.UncorrectableECC > base.UncorrectableECC:
		return fmt.Sprintf("%d uncorrectable ECC error(s)", r.UncorrectableECC-base.UncorrectableECC)
	case r.RemapFailed:
		return "row remapping failed: the GPU's memory has rows it can no longer replace"
	}
	return ""
}

// Warning says what this reading shows that does not fence the GPU but an
// admin should see: a hardware slowdown, a row remap waiting for a reset.
func (r Reading) Warning() string {
	var w []string
	if r.Slowdown != "" {
		w = append(w, "slowdown: "+r.Slowdown)
	}
	if r.RemapPending {
		w = append(w, "row remap pending: reset the GPU")
	}
	return strings.Join(w, "; ")
}

// Event is an error the driver raised on a GPU: an XID, or an
// uncorrectable ECC error.
type Event struct {
	Index int
	UUID  string
	// XID is the XID number; 0 for an ECC error event.
	XID uint64
	// ECC: an uncorrectable (double-bit) ECC error.
	ECC bool
	// Lost: the driver reported a GPU as lost while waiting for events;
	// Index is then -1 and a health check tells which.
	Lost bool
	At   time.Time
}

// Hardware reports whether the event blames the GPU itself: it fences the
// GPU. Other XIDs are the job's own (a fault in its kernels or its memory
// use) and go into its record.
func (e Event) Hardware() bool {
	if e.ECC || e.Lost {
		return true
	}
	return xids[e.XID].hardware
}

// Describe names the event for people: "XID 79 (fell off the bus)".
func (e Event) Describe() string {
	switch {
	case e.Lost:
		return "a GPU was reported lost"
	case e.ECC:
		return "uncorrectable ECC error"
	}
	if x, ok := xids[e.XID]; ok {
		return fmt.Sprintf("XID %d (%s)", e.XID, x.name)
	}
	return fmt.Sprintf("XID %d", e.XID)
}

type xidInfo struct {
	name     string
	hardware bool
}

// xids are the XIDs a training job meets, after NVIDIA's XID catalog: those
// whose remedy is servicing or resetting the GPU blame the hardware; those
// whose remedy is restarting or fixing the application are the job's. An
// XID not listed is treated as the job's.
var xids = map[uint64]xidInfo{
	8:   {"GPU stopped processing", false},
	13:  {"graphics engine exception", false},
	31:  {"GPU memory page fault", false},
	32:  {"invalid or corrupted push buffer stream", false},
	43:  {"GPU stopped processing", false},
	45:  {"preemptive cleanup after an earlier error", false},
	48:  {"double-bit ECC error", true},
	61:  {"internal micro-controller breakpoint", true},
	62:  {"internal micro-controller halt", true},
	63:  {"ECC page retirement or row remap recorded", false},
	64:  {"row remapping failed", true},
	68:  {"video processor exception", false},
	69:  {"graphics engine class error", false},
	74:  {"NVLink error", true},
	79:  {"fell off the bus", true},
	92:  {"high single-bit ECC error rate", false},
	94:  {"contained ECC error", false},
	95:  {"uncontained ECC error", true},
	109: {"context switch timeout", false},
	119: {"GSP RPC timeout", true},
	120: {"GSP error", true},
	140: {"unrecovered ECC error", true},
}

// Watcher is what a Source offers beyond the inventory and telemetry: the
// compute processes on each GPU, a health reading of each, and the errors
// the driver raises. Sources without a driver to ask (static, none) have
// nothing to say.
type Watcher interface {
	// Processes lists the compute processes on each GPU, by index.
	Processes() (map[int][]Process, error)
	// Health reads each GPU's health counters.
	Health() ([]Reading, error)
	// Events delivers the driver's error events until ctx ends or the
	// source is closed; nil when the source has none.
	Events(ctx context.Context) <-chan Event
}

// Unwatched is the Watcher of a source with no driver to ask: embed it.
type Unwatched struct{}

func (Unwatched) Processes() (map[int][]Process, error) { return nil, nil }
func (Unwatched) Health() ([]Reading, error)            { return nil, nil }
func (Unwatched) Events(context.Context) <-chan Event   { return nil }
