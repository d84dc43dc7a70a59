package dashboard

import (
	"net/http"
	"strconv"
	"strings"

	"github.com/simpletuner/simpletuner-orchestration/internal/api"
)

// The usage page: each team's share of the fleet, its limits, what it holds
// and queues, its fair-share standing, and its GPU-hours per day, read from
// the admin API (scope queue.view) like simpletunerctl usage.

func (d *Dashboard) usage(w http.ResponseWriter, r *http.Request, s *session) {
	f := newForm()
	for _, k := range []string{"from", "to"} {
		f.Values[k] = strings.TrimSpace(r.URL.Query().Get(k))
	}
	u, err := d.opt.API.Usage(d.as(r, s), api.UsageQuery{From: f.V("from"), To: f.V("to")})
	status := http.StatusOK
	if err != nil {
		fail := d.failure(err, "read usage")
		if fail.Status != http.StatusUnprocessableEntity {
			d.apiErrorPage(w, r, s, *fail)
			return
		}
		// A bad day: the form again, the API's words beside the field.
		f.apiError(*fail, nil)
		status = fail.Status
	}
	d.render(w, r, status, "usage", map[string]any{"Usage": u, "Days": usageRows(u), "Form": f}, s)
}

// usageRow is one day of the per-day table: each team's GPU-hours in the
// order of Usage.Teams, and the day's total.
type usageRow struct {
	Day   string
	Hours []float64
	Total float64
}

// usageRows turns each team's list of days into one row per day, the
// table's shape.
func usageRows(u api.Usage) []usageRow {
	if len(u.Teams) == 0 {
		return nil
	}
	rows := make([]usageRow, len(u.Teams[0].Days))
	for i, d := range u.Teams[0].Days {
		rows[i].Day = d.Day
		for _, t := range u.Teams {
			h := 0.0
			if i < len(t.Days) {
				h = t.Days[i].GPUHours
			}
			rows[i].Hours = append(rows[i].Hours, h)
			rows[i].Total += h
		}
	}
	return rows
}

// busiest is the largest daily total, the scale of the day bars (at least
// one GPU-hour, so that an idle week draws empty bars).
func busiest(rows []usageRow) float64 {
	m := 1.0
	for _, r := range rows {
		m = max(m, r.Total)
	}
	return m
}

// hours shows GPU-hours to a tenth.
func hours(h float64) string { return strconv.FormatFloat(h, 'f', 1, 64) }

// share shows a fraction as a percentage to a tenth, without a trailing ".0".
func share(f float64) string {
	return strings.TrimSuffix(strconv.FormatFloat(f*100, 'f', 1, 64), ".0") + "%"
}
