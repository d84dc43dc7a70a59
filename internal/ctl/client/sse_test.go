package client

import (
	"errors"
	"io"
	"strings"
	"testing"
	"time"
)

func readAll(t *testing.T, in string) ([]Event, error) {
	t.Helper()
	rd := NewEventReader(strings.NewReader(in))
	var out []Event
	for {
		ev, err := rd.Next()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return out, nil
			}
			return out, err
		}
		out = append(out, ev)
	}
}

func TestEventReader(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     []string // Event.String of each
		err      error
	}{
		{"log and end as the orchestrator writes them",
			"event: log\ndata: step 1/3\ndata: step 2/3\n\nevent: end\ndata: {\"job_id\":\"j_1\",\"status\":\"completed\"}\n\n",
			[]string{`log ["step 1/3" "step 2/3"]`, `end ["{\"job_id\":\"j_1\",\"status\":\"completed\"}"]`}, nil},
		{"CRLF lines and comments", ": keep-alive\r\nevent: log\r\ndata: a\r\n\r\n",
			[]string{`log ["a"]`}, nil},
		{"a bare CR stays inside the line (progress bars)", "event: log\ndata: 10%\r20%\r30%\n\n",
			[]string{`log ["10%\r20%\r30%"]`}, nil},
		{"empty data lines are lines", "event: log\ndata: \ndata:\ndata: x\n\n",
			[]string{`log ["" "" "x"]`}, nil},
		{"only one space after the colon is dropped", "data:  two spaces\n\n",
			[]string{`message [" two spaces"]`}, nil},
		{"ids and unknown fields", "id: 7\nevent: log\nfoo: bar\ndata: a\n\nid:\ndata: b\n\n",
			[]string{`log id="7" ["a"]`, `message id="" ["b"]`}, nil},
		{"blank lines between events", "\n\n\nevent: log\ndata: a\n\n\n\n",
			[]string{`log ["a"]`}, nil},
		{"cut inside an event", "event: log\ndata: a\n\nevent: log\ndata: b\n",
			[]string{`log ["a"]`}, io.ErrUnexpectedEOF},
		{"cut inside a line", "event: log\ndata: a", nil, io.ErrUnexpectedEOF},
		{"empty stream", "", nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			evs, err := readAll(t, tc.in)
			if !errors.Is(err, tc.err) && !(err == nil && tc.err == nil) {
				t.Fatalf("error %v, want %v", err, tc.err)
			}
			var got []string
			for _, e := range evs {
				got = append(got, e.String())
			}
			if strings.Join(got, "|") != strings.Join(tc.want, "|") {
				t.Fatalf("got %q\nwant %q", got, tc.want)
			}
		})
	}
}

func TestEventReaderRetryAndLimit(t *testing.T) {
	rd := NewEventReader(strings.NewReader("retry: 1500\nretry: x\ndata: a\n\n"))
	if _, err := rd.Next(); err != nil || rd.Retry != 1500*time.Millisecond {
		t.Fatalf("retry: %v %v", err, rd.Retry)
	}
	rd = NewEventReader(strings.NewReader("data: " + strings.Repeat("x", 200) + "\n\n"))
	rd.maxLine = 100
	if _, err := rd.Next(); !errors.Is(err, ErrLineTooLong) {
		t.Fatalf("a line over the limit: %v", err)
	}
	// A line longer than the read buffer but under the limit is whole.
	long := strings.Repeat("y", 200<<10)
	rd = NewEventReader(strings.NewReader("data: " + long + "\n\n"))
	if ev, err := rd.Next(); err != nil || len(ev.Data) != 1 || ev.Data[0] != long {
		t.Fatalf("long line: %v (%d lines)", err, len(ev.Data))
	}
}

// FuzzEventReader: any input decodes without panicking, every event is
// complete (it ended at a blank line), and the data lines of all events are
// exactly the input's data fields, in order.
func FuzzEventReader(f *testing.F) {
	for _, s := range []string{
		"event: log\ndata: a\ndata: b\n\nevent: end\ndata: {}\n\n",
		"data:x\r\n\r\n", ": c\n\n", "id: 1\nretry: 10\n\n", "data", "\r\r\r", "event:\n\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		rd := NewEventReader(strings.NewReader(string(in)))
		rd.maxLine = len(in) + 1
		var got []string
		for i := 0; ; i++ {
			ev, err := rd.Next()
			if err != nil {
				break
			}
			if ev.Name == "" {
				t.Fatalf("event %d has no name", i)
			}
			got = append(got, ev.Data...)
		}
		// The data fields of complete events, counted the simple way.
		var want []string
		var pending []string
		for _, line := range strings.SplitAfter(string(in), "\n") {
			if !strings.HasSuffix(line, "\n") {
				break // an unterminated last line never completes an event
			}
			line = strings.TrimSuffix(strings.TrimSuffix(line, "\n"), "\r")
			switch {
			case line == "":
				want = append(want, pending...)
				pending = nil
			case strings.HasPrefix(line, "data:"):
				pending = append(pending, strings.TrimPrefix(strings.TrimPrefix(line, "data:"), " "))
			case line == "data":
				pending = append(pending, "")
			}
		}
		if strings.Join(got, "\x00") != strings.Join(want, "\x00") || len(got) != len(want) {
			t.Fatalf("data lines %q, want %q", got, want)
		}
	})
}
