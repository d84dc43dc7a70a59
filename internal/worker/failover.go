package worker

import (
	"log/slog"
	"net/http"
)

// failoverAfter moves the client on to the next configured orchestrator URL
// when a registration could not reach the one it was sent to, or found it
// unable to serve (5xx: a replica that lost its database, say). With one
// URL it does nothing. The next connection attempt, after the usual
// back-off, goes to the new URL.
func failoverAfter(c *client, log *slog.Logger, m registered) {
	if st := statusOf(m.err); st != 0 && st < http.StatusInternalServerError {
		return
	}
	if next := c.Failover(m.url); next != "" && next != m.url {
		log.Warn("orchestrator unreachable; trying the next configured URL", "unreachable", m.url, "next", next, "err", m.err)
	}
}
