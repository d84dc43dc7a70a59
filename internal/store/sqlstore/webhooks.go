package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/audit"
	"github.com/simpletuner/simpletuner-orchestration/internal/store"
)

// The webhook outbox. An event is written in the transaction of the change
// it reports, together with one delivery for each subscription that wants
// it; an event no subscription wants is not written at all. Senders claim
// due deliveries with a lease (SKIP LOCKED where rows can be locked), so two
// senders never hold one delivery, and a delivery waits while an older one
// of its subscription and key is pending: each subscription gets a job's
// (or a worker's) events in order.

// outboxRef holds the installed Outbox (nil: none).
type outboxRef struct{ o store.Outbox }

// outboxHook is what the store calls from inside its transactions, and the
// bounds on what the subscriptions hold.
type outboxHook struct {
	p      atomic.Pointer[outboxRef]
	limits atomic.Pointer[store.WebhookLimits]
}

// SetWebhookLimits sets the bounds on subscriptions and their backlogs.
func (s *Store) SetWebhookLimits(l store.WebhookLimits) { s.outbox.limits.Store(&l) }

func (s *Store) webhookLimits() store.WebhookLimits {
	if l := s.outbox.limits.Load(); l != nil {
		return *l
	}
	return store.WebhookLimits{}
}

func (h *outboxHook) get() store.Outbox {
	if r := h.p.Load(); r != nil {
		return r.o
	}
	return nil
}

// SetOutbox installs what turns changes into webhook events.
func (s *Store) SetOutbox(o store.Outbox) { s.outbox.p.Store(&outboxRef{o}) }

// emit writes the events of a change inside its transaction c and reports
// whether any was stored (wanted by a subscription).
func (s *Store) emit(ctx context.Context, c conn, events []store.OutboxEvent) (bool, error) {
	wrote := false
	for _, e := range events {
		ok, err := s.writeEvent(ctx, c, e)
		if err != nil {
			return false, err
		}
		wrote = wrote || ok
	}
	return wrote, nil
}

// emitJob and emitWorker call the installed Outbox, if any, and write what
// it returns.
func (s *Store) emitJob(ctx context.Context, c conn, before, after store.Job, t *store.JobTransition) (bool, error) {
	o, err := s.outboxFor(ctx, c)
	if o == nil || err != nil {
		return false, err
	}
	if t == nil {
		return s.emit(ctx, c, o.JobInserted(after))
	}
	return s.emit(ctx, c, o.JobMoved(before, after, t))
}

func (s *Store) emitWorker(ctx context.Context, c conn, before, after store.Worker, rec *audit.Record) (bool, error) {
	o, err := s.outboxFor(ctx, c)
	if o == nil || err != nil {
		return false, err
	}
	return s.emit(ctx, c, o.WorkerChanged(before, after, rec))
}

func (s *Store) emitCheckpoint(ctx context.Context, c conn, cp store.Checkpoint) (bool, error) {
	o, err := s.outboxFor(ctx, c)
	if o == nil || err != nil {
		return false, err
	}
	j, err := s.getJob(ctx, c, cp.JobID, false)
	if err != nil {
		return false, err
	}
	return s.emit(ctx, c, o.CheckpointKept(j, cp))
}

// outboxFor returns the installed Outbox, or nil when there is none or
// no subscription exists that could want an event (see subscribed).
func (s *Store) outboxFor(ctx context.Context, c conn) (store.Outbox, error) {
	o := s.outbox.get()
	if o == nil {
		return nil, nil
	}
	if none, err := s.noSubscriptions(ctx, c); none || err != nil {
		return nil, err
	}
	return o, nil
}

// committed tells the Outbox that a transaction which wrote events
// committed.
func (s *Store) committed(wrote bool, err error) {
	if wrote && err == nil {
		if o := s.outbox.get(); o != nil {
			o.Committed()
		}
	}
}

// writeEvent stores e and its deliveries when a subscription wants it. A
// subscription dropping its events (its backlog reached the bound) gets
// none.
func (s *Store) writeEvent(ctx context.Context, c conn, e store.OutboxEvent) (bool, error) {
	family, _, _ := strings.Cut(e.Type, ".")
	rows, err := c.query(ctx, `SELECT w.id FROM webhooks w WHERE (? = '' OR w.team = '' OR w.team = ?)
		AND w.dropping_since IS NULL
		AND EXISTS (SELECT 1 FROM webhook_filters f WHERE f.webhook_id = w.id AND f.event IN (?, ?, '*'))
		ORDER BY w.id`, e.Team, e.Team, e.Type, family+".*")
	if err != nil {
		return false, err
	}
	var subs []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			rows.Close()
			return false, err
		}
		subs = append(subs, id)
	}
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		return false, err
	}
	if len(subs) == 0 {
		return false, nil
	}
	at := now(e.Time)
	var seq int64
	if err := c.queryRow(ctx, `INSERT INTO webhook_events (id, type, order_key, team, payload, created_at)
		VALUES (?, ?, ?, ?, ?, ?) RETURNING seq`, e.ID, e.Type, e.Key, e.Team, rawArg(e.Payload, "{}"), s.tv(at)).Scan(&seq); err != nil {
		return false, err
	}
	for _, id := range subs {
		if _, err := c.exec(ctx, `INSERT INTO webhook_deliveries (webhook_id, event_seq, order_key, state, next_at, created_at)
			VALUES (?, ?, ?, ?, ?, ?)`, id, seq, e.Key, store.DeliveryPending, s.tv(at), s.tv(at)); err != nil {
			return false, err
		}
	}
	return true, nil
}

// WebhookBacklogs counts the pending deliveries of each subscription that
// has any.
func (s *Store) WebhookBacklogs(ctx context.Context) (map[string]int, error) {
	rows, err := s.reader().query(ctx, `SELECT webhook_id, COUNT(*) FROM webhook_deliveries WHERE state = 'pending'
		GROUP BY webhook_id`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var id string
		var n int
		if err := rows.Scan(&id, &n); err != nil {
			return nil, err
		}
		out[id] = n
	}
	return out, rows.Err()
}

// SetWebhookDropping starts (since set) or ends (nil) a subscription's
// dropping; false when it was so already, so that among orchestrators
// sharing the database one alone makes each change.
func (s *Store) SetWebhookDropping(ctx context.Context, id string, since *time.Time) (bool, error) {
	q, args := `UPDATE webhooks SET dropping_since = NULL WHERE id = ? AND dropping_since IS NOT NULL`, []any{id}
	if since != nil {
		q, args = `UPDATE webhooks SET dropping_since = ? WHERE id = ? AND dropping_since IS NULL`, []any{s.tv(*since), id}
	}
	changed := false
	err := s.write(ctx, func(c conn) error {
		err := affected(c.exec(ctx, q, args...))
		changed = err == nil
		if errors.Is(err, sql.ErrNoRows) {
			return nil
		}
		return err
	})
	return changed, err
}

// EmitEvents writes events in a transaction of their own.
func (s *Store) EmitEvents(ctx context.Context, events []store.OutboxEvent) error {
	var wrote bool
	err := s.write(ctx, func(c conn) error {
		var err error
		wrote, err = s.emit(ctx, c, events)
		return err
	})
	s.committed(wrote, err)
	return err
}

// webhookInsertCols are the columns a subscription is made with;
// webhookCols reads them and its dropping.
const (
	webhookInsertCols = `id, name, url, team, format, secret, source, created_at, created_by`
	webhookCols       = webhookInsertCols + `, dropping_since`
)

func scanWebhook(r scanner) (store.Webhook, error) {
	var w store.Webhook
	err := r.Scan(&w.ID, &w.Name, &w.URL, &w.Team, &w.Format, &w.Secret, &w.Source, timeCol{&w.CreatedAt}, &w.CreatedBy,
		nullTimeCol{&w.DroppingSince})
	return w, err
}

// CreateWebhook stores a subscription and the events it wants.
func (s *Store) CreateWebhook(ctx context.Context, w store.Webhook, rec *audit.Record) error {
	if w.ID == "" || w.Name == "" {
		return errors.New("store: a webhook needs an id and a name")
	}
	w.CreatedAt = now(w.CreatedAt)
	if w.Source == "" {
		w.Source = store.WebhookFromAPI
	}
	limit := s.webhookLimits().MaxSubscriptions
	return s.write(ctx, func(c conn) error {
		if limit > 0 {
			var n int
			if err := c.queryRow(ctx, `SELECT COUNT(*) FROM webhooks`).Scan(&n); err != nil {
				return err
			}
			if n >= limit {
				return fmt.Errorf("%w: there are %d, the most allowed", store.ErrTooManyWebhooks, n)
			}
		}
		if err := s.insertWebhook(ctx, c, w); err != nil {
			return err
		}
		return s.appendAudit(ctx, c, rec)
	})
}

func (s *Store) insertWebhook(ctx context.Context, c conn, w store.Webhook) error {
	s.subs.forget()
	if _, err := c.exec(ctx, `INSERT INTO webhooks (`+webhookInsertCols+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		w.ID, w.Name, w.URL, w.Team, w.Format, w.Secret, w.Source, s.tv(w.CreatedAt), w.CreatedBy); err != nil {
		return err
	}
	return s.putFilters(ctx, c, w.ID, w.Events)
}

// putFilters replaces the events a subscription wants.
func (s *Store) putFilters(ctx context.Context, c conn, id string, events []string) error {
	if _, err := c.exec(ctx, `DELETE FROM webhook_filters WHERE webhook_id = ?`, id); err != nil {
		return err
	}
	seen := map[string]bool{}
	for _, e := range events {
		if seen[e] {
			continue
		}
		seen[e] = true
		if _, err := c.exec(ctx, `INSERT INTO webhook_filters (webhook_id, event) VALUES (?, ?)`, id, e); err != nil {
			return err
		}
	}
	return nil
}

// GetWebhook reads a subscription by ID, else by name.
func (s *Store) GetWebhook(ctx context.Context, idOrName string) (store.Webhook, error) {
	c := s.reader()
	w, err := scanWebhook(c.queryRow(ctx, `SELECT `+webhookCols+` FROM webhooks WHERE id = ?`, idOrName))
	if errors.Is(err, sql.ErrNoRows) {
		w, err = scanWebhook(c.queryRow(ctx, `SELECT `+webhookCols+` FROM webhooks WHERE name = ?`, idOrName))
	}
	if err != nil {
		return w, noRows(err, "webhook", idOrName)
	}
	filters, err := s.filters(ctx, c, w.ID)
	w.Events = filters[w.ID]
	return w, err
}

// filters reads the events wanted, by subscription: one subscription's, or
// all with id "".
func (s *Store) filters(ctx context.Context, c conn, id string) (map[string][]string, error) {
	q, args := `SELECT webhook_id, event FROM webhook_filters ORDER BY webhook_id, event`, []any{}
	if id != "" {
		q, args = `SELECT webhook_id, event FROM webhook_filters WHERE webhook_id = ? ORDER BY event`, []any{id}
	}
	rows, err := c.query(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string][]string{}
	for rows.Next() {
		var wid, ev string
		if err := rows.Scan(&wid, &ev); err != nil {
			return nil, err
		}
		out[wid] = append(out[wid], ev)
	}
	return out, rows.Err()
}

// ListWebhooks returns every subscription, by name.
func (s *Store) ListWebhooks(ctx context.Context) ([]store.Webhook, error) {
	return s.listWebhooks(ctx, s.reader(), "")
}

// listWebhooks reads the subscriptions of one source ("" every one).
func (s *Store) listWebhooks(ctx context.Context, c conn, source string) ([]store.Webhook, error) {
	q, args := `SELECT `+webhookCols+` FROM webhooks ORDER BY name`, []any{}
	if source != "" {
		q, args = `SELECT `+webhookCols+` FROM webhooks WHERE source = ? ORDER BY name`, []any{source}
	}
	rows, err := c.query(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	var out []store.Webhook
	for rows.Next() {
		w, err := scanWebhook(rows)
		if err != nil {
			rows.Close()
			return nil, err
		}
		out = append(out, w)
	}
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		return nil, err
	}
	filters, err := s.filters(ctx, c, "")
	for i := range out {
		out[i].Events = filters[out[i].ID]
	}
	return out, err
}

// DeleteWebhook removes a subscription with its filters and deliveries.
func (s *Store) DeleteWebhook(ctx context.Context, id string, rec *audit.Record) error {
	return s.write(ctx, func(c conn) error {
		if err := s.deleteWebhook(ctx, c, id); err != nil {
			return err
		}
		return s.appendAudit(ctx, c, rec)
	})
}

func (s *Store) deleteWebhook(ctx context.Context, c conn, id string) error {
	s.subs.forget()
	if err := affected(c.exec(ctx, `DELETE FROM webhooks WHERE id = ?`, id)); err != nil {
		return noRows(err, "webhook", id)
	}
	if _, err := c.exec(ctx, `DELETE FROM webhook_filters WHERE webhook_id = ?`, id); err != nil {
		return err
	}
	_, err := c.exec(ctx, `DELETE FROM webhook_deliveries WHERE webhook_id = ?`, id)
	return err
}

// SyncConfigWebhooks makes the configuration's subscriptions exactly ws.
func (s *Store) SyncConfigWebhooks(ctx context.Context, ws []store.Webhook, rec func(action string, w store.Webhook) *audit.Record) error {
	return s.write(ctx, func(c conn) error {
		have, err := s.listWebhooks(ctx, c, store.WebhookFromConfig)
		if err != nil {
			return err
		}
		var recs []*audit.Record
		note := func(action string, w store.Webhook) {
			if r := rec(action, w); r != nil {
				recs = append(recs, r)
			}
		}
		for _, w := range ws {
			w.Source = store.WebhookFromConfig
			i := slices.IndexFunc(have, func(h store.Webhook) bool { return h.Name == w.Name })
			if i < 0 {
				w.CreatedAt = now(w.CreatedAt)
				if err := s.insertWebhook(ctx, c, w); err != nil {
					if s.d.IsUnique(err) {
						return fmt.Errorf("webhook %q: the name is taken by a subscription made through the API: %w", w.Name, store.ErrDuplicate)
					}
					return err
				}
				note("webhook.create", w)
				continue
			}
			old := have[i]
			have = slices.Delete(have, i, i+1)
			w.ID, w.CreatedAt, w.CreatedBy = old.ID, old.CreatedAt, old.CreatedBy
			if sameWebhook(old, w) {
				continue
			}
			if _, err := c.exec(ctx, `UPDATE webhooks SET url = ?, team = ?, format = ?, secret = ? WHERE id = ?`,
				w.URL, w.Team, w.Format, w.Secret, w.ID); err != nil {
				return err
			}
			if err := s.putFilters(ctx, c, w.ID, w.Events); err != nil {
				return err
			}
			note("webhook.update", w)
		}
		for _, gone := range have {
			if err := s.deleteWebhook(ctx, c, gone.ID); err != nil {
				return err
			}
			note("webhook.delete", gone)
		}
		return s.appendAudits(ctx, c, recs)
	})
}

func sameWebhook(a, b store.Webhook) bool {
	ea, eb := slices.Clone(a.Events), slices.Clone(b.Events)
	slices.Sort(ea)
	slices.Sort(eb)
	return a.URL == b.URL && a.Team == b.Team && a.Format == b.Format && a.Secret == b.Secret &&
		slices.Equal(slices.Compact(ea), slices.Compact(eb))
}

// deliveryCols reads a delivery with its event; the subscription's columns
// follow in claims.
const deliveryCols = `d.id, d.webhook_id, e.id, e.type, d.order_key, e.created_at, e.payload, d.state, d.attempts,
	d.next_at, d.last_status, d.last_error, d.created_at, d.ended_at`

func scanDelivery(r scanner, extra ...any) (store.WebhookDelivery, error) {
	var d store.WebhookDelivery
	err := r.Scan(append([]any{&d.ID, &d.WebhookID, &d.EventID, &d.EventType, &d.Key, timeCol{&d.EventTime},
		rawCol{&d.Payload}, &d.State, &d.Attempts, timeCol{&d.NextAttempt}, &d.LastStatus, &d.LastError,
		timeCol{&d.CreatedAt}, nullTimeCol{&d.EndedAt}}, extra...)...)
	return d, err
}

// claimableDelivery is a delivery d that may be sent now: pending, due, not
// leased, and the oldest pending one of its subscription and key (two ?: the
// due time and the lease time).
const claimableDelivery = `d.state = 'pending' AND d.next_at <= ? AND (d.lease_until IS NULL OR d.lease_until <= ?)
	AND NOT EXISTS (SELECT 1 FROM webhook_deliveries p WHERE p.webhook_id = d.webhook_id
		AND p.order_key = d.order_key AND p.state = 'pending' AND p.id < d.id)`

// ClaimWebhookDeliveries leases the due deliveries that head their
// subscription's and key's queue.
func (s *Store) ClaimWebhookDeliveries(ctx context.Context, owner string, at, until time.Time, limit int) ([]store.WebhookDelivery, error) {
	if owner == "" || limit <= 0 {
		return nil, errors.New("store: a claim needs an owner and a limit")
	}
	// Most looks find nothing claimable (nothing due, or only deliveries
	// leased or waiting behind an older one of their key): they read, with the
	// claim's own condition, and take no write turn.
	var due int
	err := s.reader().queryRow(ctx, `SELECT COUNT(*) FROM (SELECT 1 FROM webhook_deliveries d
		WHERE `+claimableDelivery+` LIMIT 1) AS due`, s.tv(at), s.tv(at)).Scan(&due)
	if err != nil || due == 0 {
		return nil, err
	}
	var out []store.WebhookDelivery
	err = s.write(ctx, func(c conn) error {
		out = nil
		rows, err := c.query(ctx, `SELECT d.id FROM webhook_deliveries d WHERE `+claimableDelivery+`
			ORDER BY d.next_at, d.id LIMIT ?`+s.d.SkipLocked, s.tv(at), s.tv(at), limit)
		if err != nil {
			return err
		}
		var ids []int64
		for rows.Next() {
			var id int64
			if err := rows.Scan(&id); err != nil {
				rows.Close()
				return err
			}
			ids = append(ids, id)
		}
		if err := errors.Join(rows.Err(), rows.Close()); err != nil {
			return err
		}
		// The chosen rows are leased and read a page at a time, whatever
		// their number: two statements for a page, not two for each.
		for page := range slices.Chunk(ids, claimPage) {
			in, args := padIDs(page)
			if _, err := c.exec(ctx, `UPDATE webhook_deliveries SET lease_owner = ?, lease_until = ? WHERE id IN (`+in+`)`,
				append([]any{owner, s.tv(until)}, args...)...); err != nil {
				return err
			}
			rows, err := c.query(ctx, `SELECT `+deliveryCols+`, w.id, w.name, w.url, w.team, w.format, w.secret
				FROM webhook_deliveries d JOIN webhook_events e ON e.seq = d.event_seq JOIN webhooks w ON w.id = d.webhook_id
				WHERE d.id IN (`+in+`) ORDER BY d.next_at, d.id`, args...)
			if err != nil {
				return err
			}
			found := map[int64]bool{}
			for rows.Next() {
				var w store.Webhook
				d, err := scanDelivery(rows, &w.ID, &w.Name, &w.URL, &w.Team, &w.Format, &w.Secret)
				if err != nil {
					rows.Close()
					return err
				}
				d.Webhook, found[d.ID] = w, true
				out = append(out, d)
			}
			if err := errors.Join(rows.Err(), rows.Close()); err != nil {
				return err
			}
			for _, id := range page {
				if found[id] {
					continue
				}
				// Its subscription was deleted as the event was written.
				if _, err := c.exec(ctx, `DELETE FROM webhook_deliveries WHERE id = ?`, id); err != nil {
					return err
				}
			}
		}
		return nil
	})
	return out, err
}

// claimPage is how many deliveries one statement of a claim leases and
// reads; the IN list always has this many entries (the last ID repeated),
// so each statement has one text and is prepared once.
const claimPage = 16

func padIDs(ids []int64) (string, []any) {
	args := make([]any, claimPage)
	for i := range args {
		args[i] = ids[min(i, len(ids)-1)]
	}
	return strings.TrimSuffix(strings.Repeat("?, ", claimPage), ", "), args
}

// FinishWebhookDeliveries records requests' outcomes under their claimers'
// leases, in one transaction.
func (s *Store) FinishWebhookDeliveries(ctx context.Context, outs []store.DeliveryOutcome) ([]error, error) {
	errs := make([]error, len(outs))
	err := s.write(ctx, func(c conn) error {
		for i, o := range outs {
			errs[i] = nil
			at := now(o.Now)
			state, next, ended := store.DeliveryPending, o.Retry, any(nil)
			switch {
			case o.Delivered:
				state, next, ended = store.DeliveryDelivered, at, s.tv(at)
			case o.GiveUp:
				state, next, ended = store.DeliveryFailed, at, s.tv(at)
			}
			err := affected(c.exec(ctx, `UPDATE webhook_deliveries SET state = ?, attempts = attempts + 1, next_at = ?,
				last_status = ?, last_error = ?, ended_at = ?, lease_owner = '', lease_until = NULL
				WHERE id = ? AND lease_owner = ? AND state = 'pending'`,
				state, s.tv(next), o.Status, o.Error, ended, o.ID, o.Owner))
			switch {
			case errors.Is(err, sql.ErrNoRows):
				errs[i] = fmt.Errorf("webhook delivery %d is no longer leased to %s: %w", o.ID, o.Owner, store.ErrConflict)
			case err != nil:
				return err
			}
		}
		return nil
	})
	return errs, err
}

// ListWebhookDeliveries returns deliveries newest first.
func (s *Store) ListWebhookDeliveries(ctx context.Context, f store.DeliveryFilter) ([]store.WebhookDelivery, error) {
	where, args := " WHERE 1 = 1", []any{}
	if f.WebhookID != "" {
		where += " AND d.webhook_id = ?"
		args = append(args, f.WebhookID)
	}
	if f.State != "" {
		where += " AND d.state = ?"
		args = append(args, f.State)
	}
	if f.BeforeID > 0 {
		where += " AND d.id < ?"
		args = append(args, f.BeforeID)
	}
	rows, err := s.reader().query(ctx, `SELECT `+deliveryCols+` FROM webhook_deliveries d
		JOIN webhook_events e ON e.seq = d.event_seq`+where+` ORDER BY d.id DESC LIMIT ?`, append(args, limitArg(f.Limit))...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []store.WebhookDelivery
	for rows.Next() {
		d, err := scanDelivery(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, d)
	}
	return out, rows.Err()
}

// CountWebhookDeliveries counts the pending and the failed deliveries (the
// delivered ones are history: they are not counted), of one subscription or
// of all.
func (s *Store) CountWebhookDeliveries(ctx context.Context, webhookID string) (map[string]int, error) {
	out := map[string]int{}
	var args []any
	if webhookID != "" {
		args = []any{webhookID}
	}
	for _, state := range []string{store.DeliveryPending, store.DeliveryFailed} {
		var n int
		if err := s.reader().queryRow(ctx, DeliveryCountQuery(state, webhookID != ""), args...).Scan(&n); err != nil {
			return nil, err
		}
		if n > 0 {
			out[state] = n
		}
	}
	return out, nil
}

// DeliveryCountQuery is the statement that counts the deliveries in state,
// of one subscription (its id the one argument) or of all. The state is
// written into the statement, so that the engines plan it with that state's
// partial index.
func DeliveryCountQuery(state string, oneWebhook bool) string {
	q := `SELECT COUNT(*) FROM webhook_deliveries WHERE state = '` + state + `'`
	if oneWebhook {
		q += ` AND webhook_id = ?`
	}
	return q
}

// PruneWebhookDeliveries deletes deliveries that ended before cutoff, then
// the events no delivery needs any more.
func (s *Store) PruneWebhookDeliveries(ctx context.Context, cutoff time.Time, limit int) (int, error) {
	var n int
	err := s.write(ctx, func(c conn) error {
		res, err := c.exec(ctx, `DELETE FROM webhook_deliveries WHERE id IN (SELECT id FROM webhook_deliveries
			WHERE ended_at IS NOT NULL AND ended_at < ? ORDER BY ended_at LIMIT ?)`, s.tv(cutoff), limitArg(limit))
		if err != nil {
			return err
		}
		deleted, err := res.RowsAffected()
		if err != nil {
			return err
		}
		n = int(deleted)
		_, err = c.exec(ctx, `DELETE FROM webhook_events WHERE seq IN (SELECT e.seq FROM webhook_events e
			WHERE e.created_at < ? AND NOT EXISTS (SELECT 1 FROM webhook_deliveries d WHERE d.event_seq = e.seq)
			ORDER BY e.created_at LIMIT ?)`, s.tv(cutoff), limitArg(limit))
		return err
	})
	return n, err
}
