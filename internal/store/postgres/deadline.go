package postgres

import (
	"context"
	"net"
	"sync"
	"time"
)

// A database that went silent without closing the connection (a firewall
// that dropped its state, a proxy that stopped forwarding) never makes a read
// fail: the driver would wait for an answer forever, and so would every
// request holding that connection. Kernel keep-alives do not help when a
// middlebox still acknowledges the packets. So each connection here expects
// an answer: once something was written, the next byte must arrive within
// the timeout, or the connection is declared dead (its read fails) and the
// pool replaces it. An idle connection waits as long as it likes.

// answerDialer dials connections that time out unanswered requests; with a
// zero timeout, plain connections.
type answerDialer struct {
	timeout time.Duration
}

func (d answerDialer) Dial(network, address string) (net.Conn, error) {
	return d.DialContext(context.Background(), network, address)
}

func (d answerDialer) DialTimeout(network, address string, timeout time.Duration) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return d.DialContext(ctx, network, address)
}

func (d answerDialer) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	nd := net.Dialer{Timeout: d.timeout, KeepAlive: 15 * time.Second}
	c, err := nd.DialContext(ctx, network, address)
	if err != nil || d.timeout <= 0 {
		return c, err
	}
	return &answerConn{Conn: c, timeout: d.timeout}, nil
}

// answerConn arms a read deadline when it writes to an idle connection and
// clears it when an answer arrives.
type answerConn struct {
	net.Conn
	timeout time.Duration
	mu      sync.Mutex
	waiting bool // something was written that has had no answer yet
}

func (c *answerConn) Write(b []byte) (int, error) {
	c.mu.Lock()
	if !c.waiting {
		c.waiting = true
		_ = c.Conn.SetReadDeadline(time.Now().Add(c.timeout))
	}
	c.mu.Unlock()
	// A peer that stopped reading fills the socket buffers: bound the write too.
	_ = c.Conn.SetWriteDeadline(time.Now().Add(c.timeout))
	return c.Conn.Write(b)
}

func (c *answerConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 {
		c.mu.Lock()
		if c.waiting {
			c.waiting = false
			_ = c.Conn.SetReadDeadline(time.Time{})
		}
		c.mu.Unlock()
	}
	return n, err
}
