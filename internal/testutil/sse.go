package testutil

import (
	"bytes"
	"strings"
)

// SSEEvent is an event as a client that follows the event-stream rules sees it.
type SSEEvent struct {
	Type string
	Data string
	ID   string
}

// ParseSSE interprets a stream by the event-stream rules: lines end at CR LF,
// CR or LF; an empty line dispatches; "field: value" with one leading space
// dropped from the value; "data" lines are joined with LF; a line starting
// with ":" is a comment; an event with no data is not dispatched. A
// trailing incomplete event is dropped, as a client drops it.
func ParseSSE(stream []byte) []SSEEvent {
	var events []SSEEvent
	var typ, id string
	var data strings.Builder
	hasData := false
	for len(stream) > 0 {
		i := bytes.IndexAny(stream, "\r\n")
		if i < 0 {
			break // no line end: incomplete
		}
		line := string(stream[:i])
		if stream[i] == '\r' && i+1 < len(stream) && stream[i+1] == '\n' {
			i++
		}
		stream = stream[i+1:]
		if line == "" {
			if hasData {
				d := strings.TrimSuffix(data.String(), "\n")
				events = append(events, SSEEvent{Type: typ, Data: d, ID: id})
			}
			typ, hasData = "", false
			data.Reset()
			continue
		}
		if line[0] == ':' {
			continue
		}
		field, value, _ := strings.Cut(line, ":")
		value = strings.TrimPrefix(value, " ")
		switch field {
		case "event":
			typ = value
		case "data":
			data.WriteString(value)
			data.WriteByte('\n')
			hasData = true
		case "id":
			if !strings.ContainsRune(value, 0) {
				id = value
			}
		}
	}
	return events
}
