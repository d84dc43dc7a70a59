package output

import (
	"bytes"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

func TestParseFormat(t *testing.T) {
	for in, want := range map[string]Format{"": TableFormat, "table": TableFormat, "WIDE": WideFormat, "json": JSONFormat} {
		if got, err := ParseFormat(in); err != nil || got != want {
			t.Errorf("%q: %v %v", in, got, err)
		}
	}
	if _, err := ParseFormat("yaml"); err == nil || !strings.Contains(err.Error(), `"yaml"`) {
		t.Errorf("yaml: %v", err)
	}
}

func TestTruncateAndAge(t *testing.T) {
	for _, tc := range []struct {
		in   string
		n    int
		want string
	}{{"gpu-1", 16, "gpu-1"}, {"abcdef", 4, "abc…"}, {"äöüäöü", 3, "äö…"}, {"x", 0, "x"}} {
		if got := Truncate(tc.in, tc.n); got != tc.want {
			t.Errorf("Truncate(%q, %d) = %q", tc.in, tc.n, got)
		}
	}
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	for d, want := range map[time.Duration]string{
		-time.Second: "0s", 0: "0s", 59 * time.Second: "59s", 61 * time.Second: "1m", 90 * time.Minute: "1h",
		47 * time.Hour: "47h", 49 * time.Hour: "2d",
	} {
		if got := Age(now, now.Add(-d)); got != want {
			t.Errorf("Age of %s = %q, want %q", d, got, want)
		}
	}
	if Age(now, time.Time{}) != "-" {
		t.Error("zero time")
	}
	s := "2026-03-01T11:00:00Z"
	if !ParseTime(&s).Equal(now.Add(-time.Hour)) || !ParseTime(nil).IsZero() {
		t.Error("ParseTime")
	}
	bad := "yesterday"
	if !ParseTime(&bad).IsZero() {
		t.Error("ParseTime of garbage")
	}
}

func TestTable(t *testing.T) {
	tb := NewTable("NAME", "STATUS")
	tb.Row("a\tb", "")
	tb.Row("long-name", "idle")
	var buf bytes.Buffer
	if err := tb.Write(&buf); err != nil {
		t.Fatal(err)
	}
	want := "NAME       STATUS\na b        -\nlong-name  idle\n"
	if buf.String() != want || tb.Len() != 2 {
		t.Fatalf("got %q", buf.String())
	}
}

func TestWriteJSONKeepsTheReply(t *testing.T) {
	var buf bytes.Buffer
	if err := WriteJSON(&buf, []byte(` {"b":1,"a":[true,null]} `)); err != nil {
		t.Fatal(err)
	}
	if buf.String() != "{\n  \"b\": 1,\n  \"a\": [\n    true,\n    null\n  ]\n}\n" {
		t.Fatalf("%q", buf.String())
	}
	if err := WriteJSON(&buf, []byte(`<html>`)); err == nil {
		t.Fatal("HTML accepted as JSON")
	}
}

func TestStylerOffAndOn(t *testing.T) {
	if (Styler{}).State("idle") != "idle" || (Styler{}).Header("S") != "S" {
		t.Error("colour off must leave words alone")
	}
	on := Styler{On: true}
	// Every colour sequence has the same length, whatever the state.
	n := len(on.State("idle")) - len("idle")
	for _, w := range []string{"failed", "running", "unknown-state", "revoked", ""} {
		word := w
		if word == "" {
			word = "-"
		}
		if got := len(on.State(w)) - len(word); got != n {
			t.Errorf("%q: %d bytes of escapes, want %d", w, got, n)
		}
	}
	if len(on.Header("STATUS"))-len("STATUS") != n {
		t.Error("header escapes differ in length")
	}
}

func TestSanitize(t *testing.T) {
	for in, want := range map[string]string{
		"plain name":               "plain name",
		"a\x1b[2Jb":                `a\x1b[2Jb`,
		"title\x1b]0;x\x07":        `title\x1b]0;x\x07`,
		"c1\u009b31m":              `c1\x9b31m`,
		"r\u202eevil":              `r\u202eevil`,
		"bad\xffutf8":              `bad\xffutf8`,
		"line\nnext\rover":         "line\nnext\\x0dover",
		red + "idle" + resetSq:     red + "idle" + resetSq,
		"\x1b[1;31mfake" + resetSq: `\x1b[1;31mfake` + resetSq,
	} {
		if got := Sanitize(in); got != want {
			t.Errorf("Sanitize(%q) = %q, want %q", in, got, want)
		}
	}
}

func FuzzSanitize(f *testing.F) {
	f.Add("gpu\x1b[2J\u202e\x9b")
	f.Add(red + "x" + resetSq)
	f.Fuzz(func(t *testing.T, s string) {
		out := Sanitize(s)
		for _, seq := range ownSequences {
			out = strings.ReplaceAll(out, seq, "")
		}
		for _, r := range out {
			if unsafeRune(r) {
				t.Fatalf("Sanitize(%q) leaves %U", s, r)
			}
		}
		if !utf8.ValidString(out) {
			t.Fatalf("Sanitize(%q) is not valid UTF-8", s)
		}
	})
}
