// Package hub keeps the event stream each connected worker holds open on this
// orchestrator instance, and queues framed events onto them without ever
// blocking the sender: a reader that falls behind is dropped instead.
package hub

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
)

// streamBuffer bounds the events queued for one worker. A reader that falls
// this far behind is dropped (it reconnects and re-registers) rather than
// stalling dispatch to everyone else.
const streamBuffer = 64

// Hub tracks the open SSE stream of each worker connected to this instance.
type Hub struct {
	mu      sync.Mutex
	streams map[string]*Stream
	seq     atomic.Uint64
	dropped atomic.Int64
	log     *slog.Logger
}

// Stream is one worker's open event stream.
type Stream struct {
	WorkerID string
	// TokenHash is the digest of the token that opened the stream. A stream
	// lives only as long as that token is the worker's.
	TokenHash string
	events    chan Outgoing
	done      chan struct{}
	once      sync.Once
	reason    atomic.Value // string
}

// Outgoing is a framed event waiting to be written to a stream.
type Outgoing struct {
	Frame []byte
	// JobID is set on a job_submit: before it is written, the stream's token
	// is checked once more, for the event carries the job's secrets.
	JobID string
}

// New returns an empty hub.
func New(log *slog.Logger) *Hub {
	return &Hub{streams: map[string]*Stream{}, log: log}
}

// Dropped counts the streams closed because their reader fell behind.
func (h *Hub) Dropped() int64 { return h.dropped.Load() }

// Done is closed when the stream must end.
func (st *Stream) Done() <-chan struct{} { return st.done }

// Events yields framed SSE events ready to write.
func (st *Stream) Events() <-chan Outgoing { return st.events }

// Reason says why the stream was closed ("" while open).
func (st *Stream) Reason() string {
	r, _ := st.reason.Load().(string)
	return r
}

// Close tells the stream to end with reason; its handler then detaches it.
func (st *Stream) Close(reason string) {
	st.once.Do(func() {
		st.reason.Store(reason)
		close(st.done)
	})
}

// Attach registers a new stream for a worker, opened with the token whose
// digest is tokenHash, closing the one it replaces.
func (h *Hub) Attach(workerID, tokenHash string) *Stream {
	st := &Stream{WorkerID: workerID, TokenHash: tokenHash, events: make(chan Outgoing, streamBuffer), done: make(chan struct{})}
	h.mu.Lock()
	old := h.streams[workerID]
	h.streams[workerID] = st
	h.mu.Unlock()
	if old != nil {
		old.Close("replaced by a newer stream")
	}
	return st
}

// Detach removes st if it is still the worker's current stream; a replaced
// stream's cleanup therefore never unregisters its successor.
func (h *Hub) Detach(st *Stream) bool {
	st.Close("stream ended")
	h.mu.Lock()
	current := h.streams[st.WorkerID] == st
	if current {
		delete(h.streams, st.WorkerID)
	}
	h.mu.Unlock()
	return current
}

// Connected reports whether the worker has an open stream here.
func (h *Hub) Connected(workerID string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	_, ok := h.streams[workerID]
	return ok
}

// Streams lists the open streams here.
func (h *Hub) Streams() []*Stream {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]*Stream, 0, len(h.streams))
	for _, st := range h.streams {
		out = append(out, st)
	}
	return out
}

// ConnectedIDs lists the workers with an open stream here; a stream already
// told to close (and not yet detached by its handler) is left out.
func (h *Hub) ConnectedIDs() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	ids := make([]string, 0, len(h.streams))
	for id, st := range h.streams {
		select {
		case <-st.done:
			continue
		default:
		}
		ids = append(ids, id)
	}
	return ids
}

// Count is the number of open streams.
func (h *Hub) Count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.streams)
}

// Frame encodes one SSE event: an id, the type, and the JSON on a single data
// line (upstream's agent reads only lines starting with "data: ").
func (h *Hub) Frame(typ string, v any) ([]byte, error) {
	data, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return []byte(fmt.Sprintf("id: %d\nevent: %s\ndata: %s\n\n", h.seq.Add(1), typ, data)), nil
}

// Send queues an event for a worker. It returns false when the worker has no
// stream here or its buffer is full (the stream is then closed).
func (h *Hub) Send(workerID, typ string, v any) bool {
	frame, err := h.Frame(typ, v)
	if err != nil {
		h.log.Error("cannot encode event", "type", typ, "err", err)
		return false
	}
	out := Outgoing{Frame: frame}
	if ev, ok := v.(protocol.JobSubmitEvent); ok {
		out.JobID = ev.JobID
	}
	return h.send(workerID, out)
}

// SendFrame queues an already framed event.
func (h *Hub) SendFrame(workerID string, frame []byte) bool {
	return h.send(workerID, Outgoing{Frame: frame})
}

func (h *Hub) send(workerID string, out Outgoing) bool {
	h.mu.Lock()
	st := h.streams[workerID]
	h.mu.Unlock()
	if st == nil {
		return false
	}
	select {
	case <-st.done:
		return false
	default:
	}
	select {
	case st.events <- out:
		return true
	default:
		h.log.Warn("worker stream is not reading; dropping it", "worker_id", workerID)
		h.dropped.Add(1)
		st.Close("reader too slow")
		h.Detach(st)
		return false
	}
}

// Close ends a worker's stream, if it has one here.
func (h *Hub) Close(workerID, reason string) bool {
	h.mu.Lock()
	st := h.streams[workerID]
	h.mu.Unlock()
	if st == nil {
		return false
	}
	st.Close(reason)
	h.Detach(st)
	return true
}

// CloseAll ends every stream (shutdown).
func (h *Hub) CloseAll() {
	for _, id := range h.ConnectedIDs() {
		h.Close(id, "orchestrator shutting down")
	}
}
