package sqlstore

import (
	"bytes"
	"encoding/json"
	"fmt"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/store"
)

// Scanners that accept what either engine returns: integer microseconds or a
// timestamp for times, string or bytes for JSON text.

type timeCol struct{ t *time.Time }

func (c timeCol) Scan(src any) error {
	t, err := toTime(src)
	if err != nil {
		return err
	}
	if t == nil {
		return fmt.Errorf("unexpected NULL time")
	}
	*c.t = *t
	return nil
}

type nullTimeCol struct{ t **time.Time }

func (c nullTimeCol) Scan(src any) error {
	t, err := toTime(src)
	*c.t = t
	return err
}

func toTime(src any) (*time.Time, error) {
	var t time.Time
	switch v := src.(type) {
	case nil:
		return nil, nil
	case int64:
		t = time.UnixMicro(v).UTC()
	case time.Time:
		t = v.UTC()
	default:
		return nil, fmt.Errorf("cannot scan %T into a time", src)
	}
	return &t, nil
}

func textOf(src any) ([]byte, bool, error) {
	switch v := src.(type) {
	case nil:
		return nil, false, nil
	case string:
		return []byte(v), true, nil
	case []byte:
		return append([]byte(nil), v...), true, nil
	}
	return nil, false, fmt.Errorf("cannot scan %T into JSON", src)
}

// nullIntCol scans an integer that may be NULL (nil).
type nullIntCol struct{ p **int }

func (c nullIntCol) Scan(src any) error {
	switch v := src.(type) {
	case nil:
		*c.p = nil
	case int64:
		n := int(v)
		*c.p = &n
	default:
		return fmt.Errorf("cannot scan %T into an integer", src)
	}
	return nil
}

// rawCol scans JSON text; NULL leaves nil.
type rawCol struct{ p *json.RawMessage }

func (c rawCol) Scan(src any) error {
	b, ok, err := textOf(src)
	if ok {
		*c.p = b
	} else {
		*c.p = nil
	}
	return err
}

// gpuInfoCol scans a worker's gpu_info and reads it once.
type gpuInfoCol struct{ p *store.GPUInfo }

func (c gpuInfoCol) Scan(src any) error {
	var raw json.RawMessage
	if err := (rawCol{&raw}).Scan(src); err != nil {
		return err
	}
	*c.p = store.ReadGPUInfo(raw)
	return nil
}

// jsonCol scans JSON text into a Go value (maps, slices).
type jsonCol struct{ v any }

func (c jsonCol) Scan(src any) error {
	b, ok, err := textOf(src)
	if err != nil || !ok {
		return err
	}
	// Most label maps are empty; every worker and job read scans some.
	if m, isLabels := c.v.(*map[string]string); isLabels && string(b) == "{}" {
		*m = map[string]string{}
		return nil
	}
	return json.Unmarshal(b, c.v)
}

// storedRaw is JSON text as a read of what rawArg bound returns it: nil for
// nil or empty (NULL, or the caller's default), else a copy.
func storedRaw(raw json.RawMessage) json.RawMessage {
	if len(raw) == 0 {
		return nil
	}
	return bytes.Clone(raw)
}

// rawArg binds JSON text; nil or empty binds def (nil for NULL).
func rawArg(raw json.RawMessage, def any) any {
	if len(raw) == 0 {
		return def
	}
	return string(raw)
}

// jsonArg binds a Go value as JSON text.
func jsonArg(v any) (any, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return string(b), nil
}

// labelsArg binds a label map; nil stores {}.
func labelsArg(m map[string]string) any {
	if m == nil {
		return "{}"
	}
	b, _ := json.Marshal(m) // a map[string]string always marshals
	return string(b)
}

// placeholders returns "?, ?, …" for n values.
func placeholders(n int) string {
	b := make([]byte, 0, 3*n)
	for i := 0; i < n; i++ {
		if i > 0 {
			b = append(b, ", "...)
		}
		b = append(b, '?')
	}
	return string(b)
}

// noLimit stands for "no limit" where the engine needs a number.
const noLimit = int64(1) << 62

func limitArg(limit int) int64 {
	if limit <= 0 {
		return noLimit
	}
	return int64(limit)
}
