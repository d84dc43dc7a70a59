package orchclient

import (
	"context"
	"sync"
)

// Token is the worker token in force. An admin may rotate it while workerd
// runs: the orchestrator then answers 401 to the old one, and workerd
// installs the new one from the token's source. The goroutines that stop
// sending while the token is refused (heartbeats, report flushes) wait on
// changed.
type Token struct {
	mu      sync.Mutex
	token   string
	refused string        // the token a 401 refused; "" none
	changed chan struct{} // closed and replaced when the token changes
}

// Get is the token in force.
func (t *Token) Get() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.token
}

// Set installs token; it reports whether it differs from the one in force.
func (t *Token) Set(token string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.changed == nil {
		t.changed = make(chan struct{})
	}
	if token == t.token {
		return false
	}
	t.token = token
	close(t.changed)
	t.changed = make(chan struct{})
	return true
}

// Refuse records that the orchestrator answered 401 to token; a token
// already replaced is ignored. It reports whether token is the one in force.
func (t *Token) Refuse(token string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if token != t.token {
		return false
	}
	t.refused = token
	return true
}

// waitUsable returns nil when the token in force has not been refused, else
// a channel closed when it is replaced.
func (t *Token) waitUsable() <-chan struct{} {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.refused == "" || t.refused != t.token {
		return nil
	}
	return t.changed
}

// WaitUntilUsable blocks while the token in force is refused (a heartbeat or
// report sender then has nothing to send that could succeed); false once ctx
// or stop ends.
func (t *Token) WaitUntilUsable(ctx context.Context, stop <-chan struct{}) bool {
	for {
		ch := t.waitUsable()
		if ch == nil {
			return true
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return false
		case <-stop:
			return false
		}
	}
}
