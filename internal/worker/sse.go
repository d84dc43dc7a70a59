package worker

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"strings"
)

// sseEvent is one dispatched Server-Sent Event.
type sseEvent struct {
	ID    string
	Event string // "" when the stream gave no event: field
	Data  string
}

// maxSSELine bounds one line of the stream; a job_submit carries the whole training
// config, so this is generous, but a runaway line must not eat the worker's memory.
const maxSSELine = 16 << 20

var errSSELineTooLong = errors.New("sse: line longer than 16 MiB")

// readSSE parses an event stream as the WHATWG spec describes: lines end in LF, CR
// or CRLF; "field: value" with one optional space after the colon; data lines join
// with LF; a blank line dispatches; lines starting with ":" are comments; an event
// with no data is not dispatched. It returns the reader's error (io.EOF for a clean
// close) or emit's.
func readSSE(r io.Reader, emit func(sseEvent) error) error {
	lr := &lineReader{br: bufio.NewReaderSize(r, 64<<10)}
	var (
		ev      sseEvent
		data    strings.Builder
		hasData bool
		lastID  string
	)
	for {
		line, err := lr.next()
		if err != nil {
			return err
		}
		if line == "" {
			if hasData {
				ev.ID = lastID
				ev.Data = data.String()
				if err := emit(ev); err != nil {
					return err
				}
			}
			ev, hasData = sseEvent{}, false
			data.Reset()
			continue
		}
		if line[0] == ':' {
			continue
		}
		field, value, found := strings.Cut(line, ":")
		if found {
			value = strings.TrimPrefix(value, " ")
		}
		switch field {
		case "event":
			ev.Event = value
		case "data":
			if hasData {
				data.WriteByte('\n')
			}
			data.WriteString(value)
			hasData = true
		case "id":
			if !strings.ContainsRune(value, 0) {
				lastID = value
			}
		case "retry":
			// The server's reconnection hint; our back-off is our own.
		}
	}
}

// lineReader splits a stream into lines ending in LF, CR or CRLF. After a CR it
// does not wait for a possible LF (that could stall an event until the next bytes
// arrive); it skips the LF when it comes.
type lineReader struct {
	br     *bufio.Reader
	skipLF bool
}

// next returns one line without its terminator.
func (lr *lineReader) next() (string, error) {
	var buf []byte
	for {
		b, err := lr.br.ReadByte()
		if err != nil {
			// An unterminated last line is discarded, as the SSE format requires.
			return "", err
		}
		if lr.skipLF {
			lr.skipLF = false
			if b == '\n' {
				continue
			}
		}
		switch b {
		case '\n':
			return string(buf), nil
		case '\r':
			lr.skipLF = true
			return string(buf), nil
		}
		buf = append(buf, b)
		// Copy the rest of the line that is already buffered in one go.
		if rest, _ := lr.br.Peek(lr.br.Buffered()); len(rest) > 0 {
			i := bytes.IndexAny(rest, "\r\n")
			if i < 0 {
				i = len(rest)
			}
			buf = append(buf, rest[:i]...)
			_, _ = lr.br.Discard(i)
		}
		if len(buf) > maxSSELine {
			return "", errSSELineTooLong
		}
	}
}
