package daemon

import (
	"log/slog"
	"strings"
	"sync"

	sddaemon "github.com/coreos/go-systemd/v22/daemon"
)

// notifier tells systemd the daemon's state (sd_notify). It remembers the
// last STATUS= line, so that an unchanged status is not resent every poll,
// and warns once when the notify socket fails.
type notifier struct {
	log        *slog.Logger
	mu         sync.Mutex
	lastStatus string
	warned     bool
}

func (n *notifier) status(s string) {
	s = oneLine(s)
	n.mu.Lock()
	changed := s != n.lastStatus
	n.mu.Unlock()
	if changed {
		n.send("STATUS=" + s)
	}
}

func (n *notifier) send(state string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, line := range strings.Split(state, "\n") {
		if s, ok := strings.CutPrefix(line, "STATUS="); ok {
			n.lastStatus = s
		}
	}
	if err := Notify(state); err != nil && !n.warned {
		// Once is enough: a broken notify socket would otherwise flood the log.
		n.log.Warn("sd_notify failed", "err", err)
		n.warned = true
	}
}

// Notify sends state to the service manager (sd_notify). Without NOTIFY_SOCKET it does
// nothing and returns nil.
func Notify(state string) error {
	_, err := sddaemon.SdNotify(false, state)
	return err
}

// oneLine keeps a STATUS= value on one line; a newline would start a new assignment.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}
