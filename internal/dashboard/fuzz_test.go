package dashboard

import (
	"maps"
	"net/url"
	"strings"
	"testing"
)

// FuzzParseLabels: whatever is typed, the parser either names the bad line or
// returns trimmed, non-empty keys, and what it returns survives a round trip
// through the form's own formatting.
func FuzzParseLabels(f *testing.F) {
	for _, s := range []string{"", "a=b", "zone=eu\ngpu_type=a100*", " k = v = w \r\n\n", "=x", "nokey", "a=b\na=c"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text string) {
		m, err := parseLabels(text)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "line ") {
				t.Fatalf("error does not name the line: %v", err)
			}
			return
		}
		for k, v := range m {
			if k == "" || k != strings.TrimSpace(k) || v != strings.TrimSpace(v) || strings.ContainsAny(k, "=\n") {
				t.Fatalf("bad label %q=%q from %q", k, v, text)
			}
		}
		again, err := parseLabels(formatLabels(m))
		if err != nil || !maps.Equal(m, again) {
			t.Fatalf("round trip of %v: %v, %v", m, again, err)
		}
	})
}

// FuzzSafeNext: a post-sign-in destination never leaves the dashboard.
func FuzzSafeNext(f *testing.F) {
	for _, s := range []string{"/ui/", "/ui/workers?status=idle", "//evil/ui/", "https://evil/ui/", "/ui/../api", "/ui\\..", "javascript:x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, next string) {
		got := safeNext(next)
		u, err := url.Parse(got)
		if err != nil || u.Scheme != "" || u.Host != "" || !strings.HasPrefix(got, Prefix) || strings.HasPrefix(got, "//") ||
			strings.Contains(u.Path, "..") {
			t.Fatalf("safeNext(%q) = %q leaves the dashboard", next, got)
		}
	})
}
