package protocol

import (
	"fmt"
	"maps"
	"path"
	"slices"
	"strings"
	"unicode/utf8"
)

// Limits on worker labels and on the label patterns a job asks for. Matching
// one pattern against one value costs up to about len(pattern) ×
// len(value) steps, and the scheduler matches every queued job against
// every idle worker, so both sides are kept short; the limits follow the
// usual ones for labels (63 bytes, as in DNS and Kubernetes).
const (
	MaxLabels       = 32 // labels on a worker, as an admin sets them or as it reports them
	MaxLabelKey     = 63 // bytes
	MaxLabelValue   = 63 // bytes
	MaxJobLabels    = 8  // worker_labels patterns on one job
	MaxLabelPattern = 63 // bytes of one pattern
)

// CheckLabels checks a worker's labels against the limits; the error names
// the offending key, the caller the field.
func CheckLabels(labels map[string]string) error {
	if len(labels) > MaxLabels {
		return fmt.Errorf("%d labels; at most %d", len(labels), MaxLabels)
	}
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		if err := checkKey(k); err != nil {
			return err
		}
		v := labels[k]
		if len(v) > MaxLabelValue {
			return fmt.Errorf("the value of %q is %d bytes long; at most %d", k, len(v), MaxLabelValue)
		}
		if err := CheckPrintable(v); err != nil {
			return fmt.Errorf("the value of %q %v", k, err)
		}
	}
	return nil
}

// CheckPrintable refuses text that would do something on a terminal or in
// a page rather than show: control characters (C0, DEL, C1: escape
// sequences that move the cursor, set a window title or the clipboard) and
// Unicode direction overrides, which make text read other than it is.
// Names and labels a worker reports end up in admins' terminals.
func CheckPrintable(s string) error {
	if !utf8.ValidString(s) {
		return fmt.Errorf("is not valid UTF-8")
	}
	for i, r := range s {
		if Unprintable(r) {
			return fmt.Errorf("has the control character %U at byte %d", r, i)
		}
	}
	return nil
}

// Unprintable reports whether r is a control character or a direction mark
// or override (LRM, RLM, ALM, LRE…RLO, LRI…PDI): what would let a name or a
// label rewrite a terminal's or a page's line around it.
func Unprintable(r rune) bool {
	return r < 0x20 || (r >= 0x7f && r < 0xa0) || r == 0x200e || r == 0x200f || r == 0x061c ||
		(r >= 0x202a && r <= 0x202e) || (r >= 0x2066 && r <= 0x2069)
}

// CheckLabelPatterns checks a job's label patterns, key → glob ("*", "?",
// "[…]"): within the limits and well formed.
func CheckLabelPatterns(patterns map[string]string) error {
	if len(patterns) > MaxJobLabels {
		return fmt.Errorf("%d patterns; at most %d", len(patterns), MaxJobLabels)
	}
	for _, k := range slices.Sorted(maps.Keys(patterns)) {
		if err := checkKey(k); err != nil {
			return err
		}
		glob := patterns[k]
		if len(glob) > MaxLabelPattern {
			return fmt.Errorf("the pattern for %q is %d bytes long; at most %d", k, len(glob), MaxLabelPattern)
		}
		if _, err := path.Match(glob, ""); err != nil {
			return fmt.Errorf("the pattern %q for %q is not a valid glob", glob, k)
		}
	}
	return nil
}

func checkKey(k string) error {
	switch {
	case strings.TrimSpace(k) == "":
		return fmt.Errorf("a key is empty")
	case len(k) > MaxLabelKey:
		return fmt.Errorf("the key %.20q… is %d bytes long; at most %d", k, len(k), MaxLabelKey)
	}
	if err := CheckPrintable(k); err != nil {
		return fmt.Errorf("the key %q %v", k, err)
	}
	return nil
}
