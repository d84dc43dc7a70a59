package sqlstore

import (
	"context"
	"sync"

	"github.com/simpletuner/simpletuner-orchestration/internal/store"
)

// subBuffer is how many notifications a slow subscriber may fall behind before
// further ones are dropped. Notifications are hints; callers also poll.
const subBuffer = 256

// Hub fans notifications out to the subscribers in this process.
type Hub struct {
	mu     sync.Mutex
	subs   map[chan store.Notification]struct{}
	closed bool
	done   chan struct{} // closed by Close
}

// NewHub returns an empty hub.
func NewHub() *Hub {
	return &Hub{subs: map[chan store.Notification]struct{}{}, done: make(chan struct{})}
}

// Subscribe returns a channel of notifications, closed when ctx ends or the hub
// closes.
func (h *Hub) Subscribe(ctx context.Context) <-chan store.Notification {
	ch := make(chan store.Notification, subBuffer)
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		close(ch)
		return ch
	}
	h.subs[ch] = struct{}{}
	h.mu.Unlock()
	go func() {
		select {
		case <-ctx.Done():
			h.remove(ch)
		case <-h.done:
		}
	}()
	return ch
}

func (h *Hub) remove(ch chan store.Notification) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := h.subs[ch]; ok {
		delete(h.subs, ch)
		close(ch)
	}
}

// Publish delivers n to every subscriber that has room for it.
func (h *Hub) Publish(n store.Notification) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for ch := range h.subs {
		select {
		case ch <- n:
		default:
		}
	}
}

// Close ends every subscription.
func (h *Hub) Close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return
	}
	h.closed = true
	close(h.done)
	for ch := range h.subs {
		delete(h.subs, ch)
		close(ch)
	}
}
