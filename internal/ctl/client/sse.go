package client

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"
)

// Event is one server-sent event.
type Event struct {
	Name string // "message" when the stream named none
	// ID is the event's id field; HasID tells an empty id from none.
	ID    string
	HasID bool
	// Data holds one element per data line, so that a log event's lines can be
	// counted and printed as they were sent.
	Data []string
}

// EventReader decodes a text/event-stream.
//
// Lines end at "\n" (a "\r" before it is dropped). A bare "\r" is kept as part
// of the line rather than ending it: this orchestrator sends none (it turns a
// progress bar's carriage returns into lines of their own), and a server or
// proxy that passes one through then loses nothing of the line.
type EventReader struct {
	r       *bufio.Reader
	maxLine int
	// Retry is the last reconnection delay the server asked for (0: none).
	Retry time.Duration
}

// MaxEventLine bounds one line of the stream.
const MaxEventLine = 16 << 20

// ErrLineTooLong is returned for a line over the reader's limit.
var ErrLineTooLong = errors.New("event stream line too long")

// NewEventReader reads events from r.
func NewEventReader(r io.Reader) *EventReader {
	return &EventReader{r: bufio.NewReaderSize(r, 64<<10), maxLine: MaxEventLine}
}

// readLine returns the next line without its terminator. At the end of input
// a final unterminated line is returned with io.EOF.
func (d *EventReader) readLine() ([]byte, error) {
	var line []byte
	for {
		frag, err := d.r.ReadSlice('\n')
		if len(line)+len(frag) > d.maxLine+1 {
			return nil, ErrLineTooLong
		}
		line = append(line, frag...)
		if err == bufio.ErrBufferFull {
			continue
		}
		if err != nil {
			return line, err
		}
		line = line[:len(line)-1]
		return bytes.TrimSuffix(line, []byte("\r")), nil
	}
}

// Next returns the next complete event. It returns io.EOF when the stream ends
// cleanly between events and io.ErrUnexpectedEOF when it ends inside one (an
// event is only complete at its blank line).
func (d *EventReader) Next() (Event, error) {
	var ev Event
	started := false
	for {
		line, err := d.readLine()
		if err != nil {
			if errors.Is(err, io.EOF) {
				if started || len(line) > 0 {
					return Event{}, io.ErrUnexpectedEOF
				}
				return Event{}, io.EOF
			}
			return Event{}, err
		}
		if len(line) == 0 {
			if !started {
				continue
			}
			if ev.Name == "" {
				ev.Name = "message"
			}
			return ev, nil
		}
		if line[0] == ':' { // a comment, used as a keep-alive
			continue
		}
		field, value := line, []byte(nil)
		if i := bytes.IndexByte(line, ':'); i >= 0 {
			field, value = line[:i], line[i+1:]
			value = bytes.TrimPrefix(value, []byte(" "))
		}
		switch string(field) {
		case "event":
			ev.Name, started = string(value), true
		case "data":
			ev.Data, started = append(ev.Data, string(value)), true
		case "id":
			if bytes.IndexByte(value, 0) < 0 {
				ev.ID, ev.HasID, started = string(value), true, true
			}
		case "retry":
			if ms, err := strconv.ParseUint(string(value), 10, 32); err == nil {
				d.Retry = time.Duration(ms) * time.Millisecond
			}
		default:
			// Unknown fields are ignored, as the format requires.
		}
	}
}

// String shows an event compactly for test failures.
func (e Event) String() string {
	id := ""
	if e.HasID {
		id = " id=" + strconv.Quote(e.ID)
	}
	return fmt.Sprintf("%s%s %q", e.Name, id, e.Data)
}
