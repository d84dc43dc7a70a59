package protocol

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// GPUText escapes what CheckPrintable refuses and cuts to MaxGPUText, so
// that whatever a process is called, the text passes the orchestrator's
// check; printable text passes unchanged.
func TestGPUTextPassesTheCheck(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"XID 79 (fell off the bus)", "XID 79 (fell off the bus)"},
		{"pid 7 (\x1b]0;t\x07x)", `pid 7 (\x1b]0;t\x07x)`},
		{"a\u202eb\u0085c\x7f", `a\u202eb\x85c\x7f`},
		{"bad \xff utf8", `bad \xff utf8`},
	} {
		if got := GPUText(c.in); got != c.want {
			t.Errorf("GPUText(%q) = %q, want %q", c.in, got, c.want)
		}
	}
	long := GPUText(strings.Repeat("\x01", MaxGPUText))
	if n := utf8.RuneCountInString(long); n != MaxGPUText || !strings.HasSuffix(long, "…") {
		t.Errorf("a long text is %d characters: %q…", n, long[:20])
	}
	if err := CheckGPUConditions([]GPUCondition{{Index: 0, State: GPUHeld, Reason: long}}); err != nil {
		t.Errorf("GPUText's output is refused: %v", err)
	}
}
