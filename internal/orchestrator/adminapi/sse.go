package adminapi

import (
	"bytes"
	"strconv"

	"github.com/simpletuner/simpletuner-orchestration/internal/store"
)

// An event stream is made of lines, and a line ends at CR LF, at a lone CR or
// at a lone LF: a client that follows the event-stream rules starts a new
// field at each of them. Job output is the job's to choose, so every one of
// these breaks in it must become a data line of its own; a bare CR left
// inside a data line would let the job write "event: end" as a field.

// logEncoder frames job output as "log" events. It remembers whether the last
// piece ended in CR, so that a CR LF split across two pieces is one break.
type logEncoder struct{ afterCR bool }

// event appends one "log" event for data to buf, with one data line per line
// of output; the break that ends data adds no empty line. id names the
// position after data (see cursorID). Nothing is appended when data holds
// nothing but the LF of a CR LF already counted.
func (e *logEncoder) event(buf *bytes.Buffer, id string, data []byte) {
	if e.afterCR && len(data) > 0 && data[0] == '\n' {
		data = data[1:]
	}
	if len(data) == 0 {
		e.afterCR = false
		return
	}
	e.afterCR = data[len(data)-1] == '\r'
	switch {
	case bytes.HasSuffix(data, []byte("\r\n")):
		data = data[:len(data)-2]
	case data[len(data)-1] == '\n' || data[len(data)-1] == '\r':
		data = data[:len(data)-1]
	}
	buf.WriteString("event: log\nid: ")
	buf.WriteString(id)
	buf.WriteByte('\n')
	for {
		i := bytes.IndexAny(data, "\r\n")
		if i < 0 {
			break
		}
		buf.WriteString("data: ")
		buf.Write(data[:i])
		buf.WriteByte('\n')
		if data[i] == '\r' && i+1 < len(data) && data[i+1] == '\n' {
			i++
		}
		data = data[i+1:]
	}
	buf.WriteString("data: ")
	buf.Write(data)
	buf.WriteString("\n\n")
}

// cursorID is the event id of a position in a job's log: "<attempt>.<offset>".
// A client that reconnects with it as Last-Event-ID resumes right after it.
func cursorID(c store.LogCursor) string {
	return strconv.Itoa(c.Attempt) + "." + strconv.FormatInt(c.Offset, 10)
}

// parseCursorID reads a Last-Event-ID; anything else than cursorID wrote
// means "from the start".
func parseCursorID(id string) (store.LogCursor, bool) {
	a, o, ok := bytes.Cut([]byte(id), []byte("."))
	if !ok {
		return store.LogCursor{}, false
	}
	attempt, err1 := strconv.Atoi(string(a))
	offset, err2 := strconv.ParseInt(string(o), 10, 64)
	if err1 != nil || err2 != nil || attempt < 0 || offset < 0 || cursorID(store.LogCursor{Attempt: attempt, Offset: offset}) != id {
		return store.LogCursor{}, false
	}
	return store.LogCursor{Attempt: attempt, Offset: offset}, true
}
