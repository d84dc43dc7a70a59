package ctl

import (
	"encoding/json"
	"strings"
	"testing"
)

// FuzzParseContentRange: any header parses or is refused, and what parses
// is a consistent range.
func FuzzParseContentRange(f *testing.F) {
	for _, s := range []string{"bytes 0-99/100", "bytes */5", "bytes 1-2/*", "bytes 9-1/3", "bytes x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, h string) {
		start, end, size, err := parseContentRange(h)
		if err != nil {
			return
		}
		if start == -1 && end == -1 {
			return // "bytes */N"
		}
		if start < 0 || end < start || (size >= 0 && end >= size) {
			t.Fatalf("%q gave %d-%d/%d", h, start, end, size)
		}
	})
}

// FuzzParseLabels: k=v arguments become a map with non-empty, trimmed keys.
func FuzzParseLabels(f *testing.F) {
	f.Add("gpu_type=a100*", "site=dc-a")
	f.Add("=x", "k")
	f.Fuzz(func(t *testing.T, a, b string) {
		m, err := parseLabels("--label", []string{a, b})
		if err != nil {
			if exitCode(err) != ExitUsage {
				t.Fatalf("a bad label is not a usage error: %v", err)
			}
			return
		}
		for k := range m {
			if k == "" || strings.TrimSpace(k) != k {
				t.Fatalf("key %q", k)
			}
		}
	})
}

// FuzzDecodeArtifacts: any listing decodes or is refused without panicking.
func FuzzDecodeArtifacts(f *testing.F) {
	f.Add([]byte(`{"artifacts": [{"path": "a", "size": 1}]}`))
	f.Add([]byte(`{"job_id": "j_1", "total_bytes": 2, "artifacts": [{"path": "b", "size": 2, "modified_at": "x"}]}`))
	f.Add([]byte(`{"artifacts": null}`))
	f.Fuzz(func(t *testing.T, in []byte) {
		list, err := decodeArtifacts(in)
		if err == nil && !json.Valid(in) {
			t.Fatalf("invalid JSON accepted: %q → %v", in, list)
		}
	})
}

// FuzzReadJSON: the submit command's config reader accepts exactly one JSON
// value and reports anything else as a usage error.
func FuzzReadJSON(f *testing.F) {
	f.Add(`{"steps": 3}`)
	f.Add(`{"a": `)
	f.Add(`{} {}`)
	f.Add(``)
	f.Fuzz(func(t *testing.T, in string) {
		raw, err := readJSON("-", strings.NewReader(in), "--config")
		if err != nil {
			if exitCode(err) != ExitUsage {
				t.Fatalf("%q: %v is not a usage error", in, err)
			}
			return
		}
		if !json.Valid(raw) {
			t.Fatalf("%q accepted as %q", in, raw)
		}
	})
}
