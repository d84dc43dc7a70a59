package e2etest

import (
	"strings"
	"testing"
)

// The scan finds a noted secret, or its random part alone, and says where
// without repeating it; text without one passes.
func TestFindSecret(t *testing.T) {
	tok := "wt_" + strings.Repeat("k", 43)
	NoteSecret("worker token", tok)
	hf := NewHFToken()
	for _, tc := range []struct {
		text, kind string
		line       int
	}{
		{"level=INFO msg=ok\nlevel=DEBUG token=" + tok + " x\n", "worker token", 2},
		{"a\nb\nbearer " + strings.Repeat("k", 43), "worker token (without its prefix)", 3},
		{`{"config":{},"hf_token":"` + hf + `"}`, "hf_token", 1},
	} {
		hit, found := FindSecret("a log", tc.text)
		if !found || hit.Kind != tc.kind || hit.Line != tc.line {
			t.Errorf("%q: found %v %+v, want a %s on line %d", tc.text, found, hit, tc.kind, tc.line)
		}
		if strings.Contains(hit.Context, strings.Repeat("k", 43)) || strings.Contains(hit.Context, hf) {
			t.Errorf("the hit repeats the secret: %q", hit.Context)
		}
	}
	if hit, found := FindSecret("a log", "token=wt_kkkkk… (a hint is fine)\n"); found {
		t.Errorf("a token hint was taken for the token: %+v", hit)
	}
}

// Scanning 50 MB of log against a thousand secrets stays quick.
func BenchmarkFindSecret(b *testing.B) {
	for i := range 1000 {
		NoteSecret("worker token", "wt_"+strings.Repeat(string(rune('a'+i%26)), 40)+strings.Repeat("x", i%7))
	}
	text := strings.Repeat("time=2026-11-21T02:14:00Z level=DEBUG msg=\"flood flood flood\" job_id=j_abcdefghijkl\n", 600000)
	b.SetBytes(int64(len(text)))
	for b.Loop() {
		if _, found := FindSecret("bench", text); found {
			b.Fatal("found a secret in clean text")
		}
	}
}
