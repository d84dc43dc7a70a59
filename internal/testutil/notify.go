package testutil

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// NotifySocket plays systemd's side of sd_notify for a test: it keeps every
// datagram sent to Path, with when it arrived. Set NOTIFY_SOCKET=Path for the
// daemon under test.
type NotifySocket struct {
	Path string

	mu   sync.Mutex
	msgs []Notification
	more chan struct{} // closed and replaced whenever a datagram arrives
}

// Notification is one datagram: one or more "KEY=value" lines.
type Notification struct {
	At   time.Time
	Text string
}

// Line is the notification's first line starting with prefix, "" when none.
func (n Notification) Line(prefix string) string {
	for line := range strings.SplitSeq(n.Text, "\n") {
		if strings.HasPrefix(line, prefix) {
			return line
		}
	}
	return ""
}

// ListenNotify opens a NotifySocket in a directory of its own under the
// system's temporary directory: t.TempDir() paths can be longer than a unix
// socket's address allows.
func ListenNotify(t testing.TB) *NotifySocket {
	t.Helper()
	dir, err := os.MkdirTemp("", "notify")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	n := &NotifySocket{Path: filepath.Join(dir, "notify.sock"), more: make(chan struct{})}
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: n.Path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	go func() {
		buf := make([]byte, 8192)
		for {
			k, err := conn.Read(buf)
			if err != nil {
				return
			}
			n.mu.Lock()
			n.msgs = append(n.msgs, Notification{At: time.Now(), Text: string(buf[:k])})
			close(n.more)
			n.more = make(chan struct{})
			n.mu.Unlock()
		}
	}()
	return n
}

// All is every notification so far, oldest first.
func (n *NotifySocket) All() []Notification {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]Notification(nil), n.msgs...)
}

// Find waits up to timeout for a notification at index from or later that
// match accepts, and returns its index; -1 when none came in time.
func (n *NotifySocket) Find(from int, timeout time.Duration, match func(Notification) bool) int {
	deadline := time.After(timeout)
	for {
		n.mu.Lock()
		for i := max(from, 0); i < len(n.msgs); i++ {
			if match(n.msgs[i]) {
				n.mu.Unlock()
				return i
			}
		}
		more := n.more
		n.mu.Unlock()
		select {
		case <-more:
		case <-deadline:
			return -1
		}
	}
}

// Wait is Find that fails t when no notification matches in time.
func (n *NotifySocket) Wait(t testing.TB, from int, timeout time.Duration, what string, match func(Notification) bool) int {
	t.Helper()
	i := n.Find(from, timeout, match)
	if i < 0 {
		var got []string
		for _, m := range n.All() {
			got = append(got, m.Text)
		}
		t.Fatalf("no notification %s within %s; got %q", what, timeout, got)
	}
	return i
}
