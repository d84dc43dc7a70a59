package dashboard

import (
	"bytes"
	"encoding/json"
	"fmt"
	"html/template"
	"math"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/webhook/spec"
)

// pageTemplate is one page: the shared layout plus the page's own file.
type pageTemplate struct{ t *template.Template }

var pageNames = []string{"signin", "signedin", "error", "overview", "workers", "worker", "token", "delete", "queue", "job", "audit", "webhooks", "webhook", "usage"}

func (d *Dashboard) parseTemplates() (map[string]*pageTemplate, error) {
	funcs := template.FuncMap{
		"asset":       d.asset,
		"ago":         d.ago,
		"duration":    duration,
		"gib":         func(mib float64) string { return strconv.FormatFloat(mib/1024, 'f', 1, 64) },
		"size":        func(b int64) string { return formatSize(float64(b)) },
		"usize":       func(b uint64) string { return formatSize(float64(b)) },
		"pct":         func(v float64) string { return strconv.FormatFloat(v, 'f', 0, 64) + "%" },
		"cancellable": cancellable,
		"gpus":        formatGPUs,
		"labels":      formatLabels,
		"pretty":      prettyJSON,
		"add":         func(a, b int) int { return a + b },
		"inList":      func(s string, list []string) bool { return slices.Contains(list, s) },
		"query":       func(kv ...string) template.URL { return template.URL(queryString(kv...)) },
		"statuses":    func() []string { return jobStatuses },
		"join":        strings.Join,
		"hasPrefix":   strings.HasPrefix,
		"split":       func(s string) []string { return strings.Split(s, ",") },
		"origin":      spec.Origin,
		"hours":       hours,
		"share":       share,
		"busiest":     busiest,
		"factor":      func(f float64) string { return strconv.FormatFloat(f, 'f', 3, 64) },
		"wstatuses": func() []string {
			return []string{"connecting", "idle", "partial", "busy", "draining", "offline"}
		},
	}
	out := map[string]*pageTemplate{}
	for _, name := range pageNames {
		t, err := template.New("layout.html").Funcs(funcs).ParseFS(files, "templates/layout.html", "templates/parts.html", "templates/"+name+".html")
		if err != nil {
			return nil, fmt.Errorf("dashboard template %s: %w", name, err)
		}
		out[name] = &pageTemplate{t}
	}
	return out, nil
}

// view is what every page template receives.
type view struct {
	S       *session
	Page    string // nav entry to mark current
	Poll    int    // live-update interval in seconds
	Version string
	Flash   string
	Data    any
}

// flashes are the fixed messages a redirect may ask a page to show; a query
// parameter picks one, so nothing from the URL is shown as is.
var flashes = map[string]string{
	"drained":         "Worker drained: it finishes its job and takes no new one.",
	"resumed":         "Worker resumed: it takes jobs again.",
	"labels":          "Labels saved.",
	"deleted":         "Worker deleted.",
	"cancel":          "Cancel requested.",
	"approved":        "Approved: the job is queued.",
	"rejected":        "Rejected: the job is cancelled.",
	"gpu_cleared":     "GPU cleared: the worker takes it back into use.",
	"webhook_deleted": "Webhook deleted.",
}

// render writes a whole page (status, layout and page) to w.
func (d *Dashboard) render(w http.ResponseWriter, r *http.Request, status int, name string, data any, s *session) {
	d.renderBlock(w, r, status, name, "layout.html", data, s)
}

// renderBlock writes one named template of a page: the layout, or a live part.
func (d *Dashboard) renderBlock(w http.ResponseWriter, r *http.Request, status int, name, block string, data any, s *session) {
	v := view{S: s, Page: name, Poll: int(d.opt.PollInterval / time.Second), Version: d.opt.Version,
		Flash: flashes[r.URL.Query().Get("ok")], Data: data}
	var buf bytes.Buffer
	if err := d.pages[name].t.ExecuteTemplate(&buf, block, v); err != nil {
		d.opt.Log.Error("dashboard: rendering failed", "page", name, "block", block, "err", err)
		http.Error(w, "rendering the page failed; see the orchestrator's log", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	if w.Header().Get("Cache-Control") == "" {
		w.Header().Set("Cache-Control", "no-store")
	}
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

// errorPage shows a message in the layout.
func (d *Dashboard) errorPage(w http.ResponseWriter, r *http.Request, s *session, status int, msg string) {
	d.render(w, r, status, "error", map[string]any{"Status": status, "Message": msg}, s)
}

// apiErrorPage shows an API refusal: a missing scope reads as such.
func (d *Dashboard) apiErrorPage(w http.ResponseWriter, r *http.Request, s *session, res apiResult) {
	msg := res.Detail
	if res.Status == http.StatusForbidden {
		msg = "Your token may not do this: " + res.Detail
	}
	d.errorPage(w, r, s, res.Status, msg)
}

var jobStatuses = []string{"pending_approval", "waiting", "queued", "dispatched", "running", "canceling", "completed", "failed", "cancelled"}

// ago writes an RFC 3339 time as "12 s ago" (empty for none).
func (d *Dashboard) ago(v any) string {
	var s string
	switch x := v.(type) {
	case string:
		s = x
	case *string:
		if x == nil {
			return ""
		}
		s = *x
	case time.Time:
		s = x.Format(time.RFC3339)
	}
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return s
	}
	return duration(d.opt.Now().Sub(t).Seconds()) + " ago"
}

// duration writes seconds the short way: "45 s", "12 min", "3 h 5 min", "2 d 4 h".
func duration(sec float64) string {
	if sec < 0 {
		sec = 0
	}
	s := int64(math.Round(sec))
	switch {
	case s < 60:
		return fmt.Sprintf("%d s", s)
	case s < 3600:
		return fmt.Sprintf("%d min", s/60)
	case s < 86400:
		return fmt.Sprintf("%d h %d min", s/3600, s%3600/60)
	}
	return fmt.Sprintf("%d d %d h", s/86400, s%86400/3600)
}

func formatLabels(m map[string]string) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for i, k := range keys {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(k + "=" + m[k])
	}
	return b.String()
}

func prettyJSON(raw json.RawMessage) string {
	var out bytes.Buffer
	if json.Indent(&out, raw, "", "  ") != nil {
		return string(raw)
	}
	return out.String()
}

// queryString builds "?k=v&…" from pairs, leaving out empty values.
func queryString(kv ...string) string {
	q := url.Values{}
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i+1] != "" && kv[i+1] != "0" {
			q.Set(kv[i], kv[i+1])
		}
	}
	if len(q) == 0 {
		return "?"
	}
	return "?" + q.Encode()
}

// formatGPUs names GPUs by index: "GPU #0", "GPUs #0, #3". A bare "0"
// reads as a count (no GPUs), so the index always carries its "#".
func formatGPUs(ix []int) string {
	parts := make([]string, len(ix))
	for i, n := range ix {
		parts[i] = "#" + strconv.Itoa(n)
	}
	if len(ix) == 1 {
		return "GPU " + parts[0]
	}
	return "GPUs " + strings.Join(parts, ", ")
}

// formatSize shows a number of bytes in the largest binary unit that keeps
// it at least 1 ("1.1 KiB", "3.0 GiB", "512 B"), so a small checkpoint does
// not read as nothing.
func formatSize(b float64) string {
	units := []string{"B", "KiB", "MiB", "GiB", "TiB"}
	u := 0
	for b >= 1024 && u < len(units)-1 {
		b /= 1024
		u++
	}
	if u == 0 {
		return strconv.FormatFloat(b, 'f', 0, 64) + " B"
	}
	return strconv.FormatFloat(b, 'f', 1, 64) + " " + units[u]
}
