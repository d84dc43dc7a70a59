package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/lib/pq"

	"github.com/simpletuner/simpletuner-orchestration/internal/store"
)

// Channel is the LISTEN/NOTIFY channel every instance shares.
const Channel = "simpletuner"

// Publish sends n to every instance listening on the database, this one included.
func (s *Store) Publish(ctx context.Context, n store.Notification) error {
	b, err := json.Marshal(n)
	if err != nil {
		return err
	}
	_, err = s.DB().ExecContext(ctx, `SELECT pg_notify($1, $2)`, Channel, string(b))
	return err
}

// Subscribe returns notifications from all instances until ctx ends or the
// store closes. After the listener reconnects (notifications may have been
// missed) subscribers get a {Kind: "resync"} so they find out again.
func (s *Store) Subscribe(ctx context.Context) (<-chan store.Notification, error) {
	if err := s.startListener(); err != nil {
		return nil, err
	}
	return s.Hub().Subscribe(ctx), nil
}

// startListener opens the store's one LISTEN connection, shared by all
// subscribers through the hub.
func (s *Store) startListener() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errors.New("postgres: store is closed")
	}
	if s.listener != nil {
		return nil
	}
	l := pq.NewDialListener(answerDialer{timeout: s.opt.Timeout}, s.url, 100*time.Millisecond, 10*time.Second, func(ev pq.ListenerEventType, err error) {
		switch ev {
		case pq.ListenerEventDisconnected:
			s.log.Warn("notification listener disconnected; reconnecting", "err", err)
		case pq.ListenerEventConnectionAttemptFailed:
			s.log.Warn("notification listener cannot reconnect", "err", err)
		case pq.ListenerEventReconnected:
			s.log.Info("notification listener reconnected")
		}
	})
	if err := l.Listen(Channel); err != nil {
		l.Close()
		return err
	}
	s.listener = l
	go s.forward(l)
	if s.opt.Timeout > 0 {
		go s.pingListener(l, s.opt.Timeout)
	}
	return nil
}

// pingListener asks the listener's server for an answer every period until
// the listener closes. The LISTEN connection only ever reads, so a server
// that went silent would otherwise look like a quiet one for good; a ping
// that gets no answer within the store's timeout breaks the connection, and
// the listener reconnects (subscribers then get a wake-up).
func (s *Store) pingListener(l *pq.Listener, period time.Duration) {
	t := time.NewTicker(period)
	defer t.Stop()
	for range t.C {
		s.mu.Lock()
		current := s.listener == l
		s.mu.Unlock()
		if !current {
			return
		}
		if err := l.Ping(); err != nil {
			s.log.Debug("notification listener ping failed", "err", err)
		}
	}
}

// forward moves notifications from the listener to the hub until it closes.
func (s *Store) forward(l *pq.Listener) {
	for pn := range l.Notify {
		if pn == nil { // reconnected: whatever was sent meanwhile is lost
			s.Hub().Publish(store.Notification{Kind: store.NotifyResync})
			continue
		}
		var n store.Notification
		if err := json.Unmarshal([]byte(pn.Extra), &n); err != nil {
			s.log.Warn("ignoring a malformed notification", "err", err)
			continue
		}
		s.Hub().Publish(n)
	}
}
