package protocol

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// Limits on what a worker reports about its GPUs in heartbeats,
// registrations and status reports. The orchestrator keeps these numbers
// and texts in memory and in the store and shows them in admins' terminals,
// so a report past a limit is refused (422, naming the field) rather than
// kept. Real values are far inside them: NVML UUIDs are 40 characters (MIG
// ones under 100), and no machine has a thousand GPUs.
const (
	// MaxGPUs bounds the entries of one report's gpus and gpu_conditions;
	// a GPU's index is 0 to MaxGPUs-1.
	MaxGPUs = 1024
	// MaxGPUUUID is the longest GPU UUID, in characters.
	MaxGPUUUID = 128
	// MaxGPUText is the longest condition reason or health text, in
	// characters.
	MaxGPUText = 1024
	// maxGPUSince is the longest condition since (an RFC 3339 time).
	maxGPUSince = 64
)

// FieldError is a report that breaks a limit: the field, as a JSON path
// (gpus[3].uuid), and what is wrong with it.
type FieldError struct {
	Field   string
	Problem string
}

func (e *FieldError) Error() string { return fmt.Sprintf("field %q %s", e.Field, e.Problem) }

func fieldErr(field, format string, args ...any) error {
	return &FieldError{Field: field, Problem: fmt.Sprintf(format, args...)}
}

// CheckGPUTelemetry checks a heartbeat's gpus: at most MaxGPUs entries,
// each index in range and listed once, UUID and health within their
// limits and free of control characters.
func CheckGPUTelemetry(gpus []GPUTelemetry) error {
	if len(gpus) > MaxGPUs {
		return fieldErr("gpus", "lists %d GPUs; at most %d", len(gpus), MaxGPUs)
	}
	seen := make(map[int]bool, len(gpus))
	for i, g := range gpus {
		at := fmt.Sprintf("gpus[%d]", i)
		if err := checkGPUIndex(at, g.Index, seen); err != nil {
			return err
		}
		if err := checkGPUText(at+".uuid", g.UUID, MaxGPUUUID); err != nil {
			return err
		}
		if err := checkGPUText(at+".health", g.Health, MaxGPUText); err != nil {
			return err
		}
	}
	return nil
}

// CheckGPUConditions checks a report's gpu_conditions: at most MaxGPUs
// entries, each index in range and listed once, a known state, and UUID,
// reason and since within their limits and free of control characters.
func CheckGPUConditions(conds []GPUCondition) error {
	if len(conds) > MaxGPUs {
		return fieldErr("gpu_conditions", "lists %d GPUs; at most %d", len(conds), MaxGPUs)
	}
	seen := make(map[int]bool, len(conds))
	for i, c := range conds {
		at := fmt.Sprintf("gpu_conditions[%d]", i)
		if err := checkGPUIndex(at, c.Index, seen); err != nil {
			return err
		}
		if c.State != GPUHeld && c.State != GPUUnhealthy {
			return fieldErr(at+".state", "must be held or unhealthy; got %q", CutText(c.State, 20))
		}
		for _, f := range []struct {
			name, v string
			limit   int
		}{{"uuid", c.UUID, MaxGPUUUID}, {"reason", c.Reason, MaxGPUText}, {"since", c.Since, maxGPUSince}} {
			if err := checkGPUText(at+"."+f.name, f.v, f.limit); err != nil {
				return err
			}
		}
	}
	return nil
}

func checkGPUIndex(at string, index int, seen map[int]bool) error {
	switch {
	case index < 0 || index >= MaxGPUs:
		return fieldErr(at+".index", "is %d; a GPU index is 0 to %d", index, MaxGPUs-1)
	case seen[index]:
		return fieldErr(at+".index", "is %d, which an earlier entry lists too", index)
	}
	seen[index] = true
	return nil
}

func checkGPUText(field, v string, limit int) error {
	if n := utf8.RuneCountInString(v); n > limit {
		return fieldErr(field, "is longer than %d characters (%d)", limit, n)
	}
	if err := CheckPrintable(v); err != nil {
		return fieldErr(field, "%v", err)
	}
	return nil
}

// GPUText makes a worker's own words about a GPU (a condition's reason, a
// health text) fit what the orchestrator accepts: control characters and
// direction marks shown escaped (\x1b, \u202e), invalid UTF-8 as \xNN, and
// the whole cut to MaxGPUText characters. A process name a job chose ends
// up in such a text; it must not make the worker's reports refused.
func GPUText(s string) string {
	return CutText(EscapeUnprintable(s), MaxGPUText)
}

// EscapeUnprintable shows what CheckPrintable refuses as escapes: a rune
// below 0x100 as \xNN, others as \uNNNN, invalid UTF-8 bytes as \xNN.
func EscapeUnprintable(s string) string {
	if CheckPrintable(s) == nil {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case Unprintable(r) && r < 0x100:
			fmt.Fprintf(&b, `\x%02x`, r)
		case Unprintable(r):
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}

// CutText shortens s to at most n characters, the last one "…" when it cut.
func CutText(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	runes := []rune(s)
	return string(runes[:n-1]) + "…"
}
