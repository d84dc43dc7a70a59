package postgres

import (
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"
)

// silentServer accepts connections, reads what comes and never answers,
// like a path that stopped forwarding without closing.
func silentServer(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { c.Close() })
			go func() { _, _ = io.Copy(io.Discard, c) }()
		}
	}()
	return l.Addr().String()
}

// A request that gets no answer fails after the timeout; a connection that
// asked nothing waits as long as it likes.
func TestAnswerConnTimesOutUnansweredRequests(t *testing.T) {
	addr := silentServer(t)
	d := answerDialer{timeout: 200 * time.Millisecond}

	asked, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer asked.Close()
	if _, err := asked.Write([]byte("SELECT 1")); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	_, err = asked.Read(make([]byte, 16))
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("unanswered read: %v, want a deadline error", err)
	}
	if took := time.Since(began); took > 2*time.Second {
		t.Errorf("the unanswered read failed after %s", took)
	}

	idle, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()
	read := make(chan error, 1)
	go func() { _, err := idle.Read(make([]byte, 16)); read <- err }()
	select {
	case err := <-read:
		t.Fatalf("an idle connection's read ended: %v", err)
	case <-time.After(600 * time.Millisecond):
	}
}

// An answer clears the deadline: the connection may then sit idle.
func TestAnswerConnAnswerClearsDeadline(t *testing.T) {
	server, client := net.Pipe()
	defer server.Close()
	c := &answerConn{Conn: client, timeout: 100 * time.Millisecond}
	defer c.Close()
	go func() {
		buf := make([]byte, 8)
		_, _ = server.Read(buf)
		_, _ = server.Write([]byte("Z"))
	}()
	if _, err := c.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Read(make([]byte, 1)); err != nil {
		t.Fatalf("answered read: %v", err)
	}
	read := make(chan error, 1)
	go func() { _, err := c.Read(make([]byte, 1)); read <- err }()
	select {
	case err := <-read:
		t.Fatalf("the read after an answer ended: %v", err)
	case <-time.After(400 * time.Millisecond):
	}
}

// A zero timeout dials plain connections.
func TestAnswerDialerZeroIsPlain(t *testing.T) {
	c, err := answerDialer{}.Dial("tcp", silentServer(t))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, ok := c.(*answerConn); ok {
		t.Error("a zero timeout wrapped the connection")
	}
}
