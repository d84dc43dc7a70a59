package ctl

import (
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/simpletuner/simpletuner-orchestration/internal/ctl/output"
	"github.com/simpletuner/simpletuner-orchestration/internal/webhook/spec"
)

// eventsWidth bounds the events column of the webhooks table.
const eventsWidth = 18

func (r renderer) webhooks(w io.Writer, subs []spec.Subscription) error {
	var t *output.Table
	if r.wide {
		t = output.NewTable("NAME", "ID", "URL", "EVENTS", "TEAM", "FORMAT", "SOURCE", "CREATED", "PENDING", r.style.Header("FAILED"))
	} else {
		t = output.NewTable("NAME", "RECEIVER", "EVENTS", "FORMAT", "PENDING", r.style.Header("FAILED"))
	}
	for _, s := range subs {
		events := strings.Join(s.Events, ",")
		pending, failed := strconv.Itoa(s.Pending), strconv.Itoa(s.Failed)
		if s.Dropping {
			pending += " DROPPING"
		}
		if r.wide {
			t.Row(s.Name, s.ID, s.URL, events, first(s.Team, "-"), s.Format, s.Source, s.CreatedAt, pending, r.style.State(failed))
			continue
		}
		t.Row(output.Truncate(s.Name, nameWidth), output.Truncate(spec.Origin(s.URL), 22), output.Truncate(events, eventsWidth),
			s.Format, pending, r.style.State(failed))
	}
	return t.Write(w)
}

// webhook is one subscription and its latest deliveries.
func (r renderer) webhook(w io.Writer, s spec.Subscription, ds []spec.Delivery) error {
	kv := [][2]string{
		{"Name", s.Name}, {"ID", s.ID}, {"URL", s.URL}, {"Events", strings.Join(s.Events, ", ")},
		{"Team", first(s.Team, "(every team)")}, {"Format", s.Format}, {"Source", s.Source},
		{"Created", s.CreatedAt + " by " + first(s.CreatedBy, "?")},
		{"Deliveries", fmt.Sprintf("%d pending, %d failed (given up)", s.Pending, s.Failed)},
	}
	if s.Dropping {
		kv = append(kv, [2]string{"Dropping", "new events are dropped since " + s.DroppingSince +
			": the pending deliveries reached webhook_delivery.max_pending; they are taken again once down to half"})
	}
	if err := writeKV(w, kv); err != nil {
		return err
	}
	if len(ds) == 0 {
		return nil
	}
	fmt.Fprintln(w)
	return r.deliveries(w, ds)
}

func (r renderer) deliveries(w io.Writer, ds []spec.Delivery) error {
	var t *output.Table
	if r.wide {
		t = output.NewTable("ID", "EVENT", "EVENT ID", "KEY", r.style.Header("STATE"), "TRIES", "EVENT TIME", "NEXT", "ENDED", "STATUS", "ERROR")
	} else {
		t = output.NewTable("ID", "EVENT", "KEY", r.style.Header("STATE"), "TRIES", "AGE", "LAST")
	}
	for _, d := range ds {
		status := "-"
		if d.LastStatus != 0 {
			status = strconv.Itoa(d.LastStatus)
		}
		id, tries := strconv.FormatInt(d.ID, 10), strconv.Itoa(d.Attempts)
		if r.wide {
			t.Row(id, d.Event, d.EventID, d.Key, r.style.State(d.State), tries, d.EventTime, first(d.NextAttempt, "-"),
				first(d.EndedAt, "-"), status, first(d.LastError, "-"))
			continue
		}
		last := status
		if d.LastError != "" && d.State != "delivered" {
			last = d.LastError
		}
		t.Row(id, d.Event, output.Truncate(d.Key, 18), r.style.State(d.State), tries, r.age(&d.EventTime), output.Truncate(last, 16))
	}
	return t.Write(w)
}
