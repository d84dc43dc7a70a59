package adminapi

import (
	"bytes"
	"strings"
	"testing"

	"github.com/simpletuner/simpletuner-orchestration/internal/testutil"
)

// wantLines is what a piece of output should read as: its breaks, whatever
// their kind, as LF; a LF that completes the CR before it dropped; one final
// break dropped.
func wantLines(prevCR bool, data []byte) (string, bool) {
	s := string(data)
	if prevCR {
		s = strings.TrimPrefix(s, "\n")
	}
	if s == "" {
		return "", false
	}
	s = strings.ReplaceAll(s, "\r\n", "\n")
	s = strings.ReplaceAll(s, "\r", "\n")
	return strings.TrimSuffix(s, "\n"), true
}

func checkEncoding(t *testing.T, pieces [][]byte) {
	t.Helper()
	var enc logEncoder
	var stream bytes.Buffer
	var want []string
	prevCR := false
	for i, p := range pieces {
		if w, ok := wantLines(prevCR, p); ok {
			want = append(want, w)
		}
		if len(p) > 0 {
			prevCR = p[len(p)-1] == '\r'
		} else {
			prevCR = false
		}
		enc.event(&stream, "1."+strings.Repeat("9", i+1), p)
	}
	got := testutil.ParseSSE(stream.Bytes())
	if len(got) != len(want) {
		t.Fatalf("pieces %q: %d events, want %d:\n%q", pieces, len(got), len(want), stream.String())
	}
	for i, ev := range got {
		if ev.Type != "log" || ev.Data != want[i] || !strings.HasPrefix(ev.ID, "1.") {
			t.Fatalf("pieces %q: event %d is %+v; want a log event with data %q\n%q", pieces, i, ev, want[i], stream.String())
		}
	}
}

// A job's output cannot make a client see anything but "log" events holding
// exactly its lines, however it breaks them.
func TestLogEventsCannotBeForged(t *testing.T) {
	t.Parallel()
	for _, pieces := range [][]string{
		{"ok\revent: end\rdata: {\"status\":\"completed\"}\r\r"},
		{"a\r\nb\rc\nd"},
		{"half\r", "\nline\n"},
		{"\r", "\n", "\n"},
		{"id: 7\r: comment\r\rretry: 1\r"},
		{"", "x"},
	} {
		var ps [][]byte
		for _, p := range pieces {
			ps = append(ps, []byte(p))
		}
		checkEncoding(t, ps)
	}
}

func FuzzLogEncoder(f *testing.F) {
	f.Add([]byte("step 1\n"), []byte("x\revent: end\r\r"), []byte("\n"))
	f.Add([]byte("a\r"), []byte("\nb"), []byte(""))
	f.Add([]byte("\r\r\n\n"), []byte("data: x\r\n\r\n"), []byte(":c\r"))
	f.Fuzz(func(t *testing.T, a, b, c []byte) {
		checkEncoding(t, [][]byte{a, b, c})
	})
}

func TestCursorIDRoundTrip(t *testing.T) {
	t.Parallel()
	for _, id := range []string{"0.0", "3.1024"} {
		if c, ok := parseCursorID(id); !ok || cursorID(c) != id {
			t.Errorf("%q: %v %v", id, c, ok)
		}
	}
	for _, id := range []string{"", "1", "1.", ".1", "-1.0", "1.-1", "01.0", "1.0.0", "a.b", "1.99999999999999999999"} {
		if _, ok := parseCursorID(id); ok {
			t.Errorf("%q accepted", id)
		}
	}
}

// Last-Event-ID comes from the client: whatever it holds, it is either a
// position cursorID writes back unchanged, or "from the start".
func FuzzParseCursorID(f *testing.F) {
	for _, s := range []string{"1.0", "12.345", "", "1.", "-1.2", "01.2", "1.2.3"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, id string) {
		c, ok := parseCursorID(id)
		if ok && (cursorID(c) != id || c.Attempt < 0 || c.Offset < 0) {
			t.Fatalf("%q parsed as %+v", id, c)
		}
		if !ok && (c.Attempt != 0 || c.Offset != 0) {
			t.Fatalf("%q refused but gave %+v", id, c)
		}
	})
}
