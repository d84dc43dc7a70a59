package dashboard

import (
	"fmt"
	"html/template"
	"strings"
	"time"
)

// Charts are drawn here, on the server, as inline SVG: a polyline per
// series over a fixed grid, no script. A point without a value breaks its
// line. Colours come from the stylesheet (the series' class names).

// line is one series of a chart: its class (the colour), a label for the
// legend and screen readers, and its points, oldest first (nil: none).
type line struct {
	Class, Label string
	Points       []*float64
}

// chart is a chart ready for a template: the SVG, its legend and, for a
// chart over time, the labels of its time axis, oldest first.
type chart struct {
	Title string
	SVG   template.HTML
	Lines []line
	Max   float64
	Unit  string
	Ticks []string
}

const chartW, chartH = 360, 80

// newChart draws lines against a y axis from 0 to top (at least 1); unit
// names the axis ("%", "GPUs").
func newChart(title, unit string, top float64, lines ...line) chart {
	for _, l := range lines {
		for _, p := range l.Points {
			if p != nil {
				top = max(top, *p)
			}
		}
	}
	top = max(top, 1)
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="chart" viewBox="0 0 %d %d" preserveAspectRatio="none" role="img" aria-label="%s">`,
		chartW, chartH, template.HTMLEscapeString(title))
	fmt.Fprintf(&b, `<title>%s</title>`, template.HTMLEscapeString(title))
	fmt.Fprintf(&b, `<line class="axis" x1="0" y1="%d" x2="%d" y2="%d"/>`, chartH, chartW, chartH)
	for _, l := range lines {
		n := len(l.Points)
		var seg []string
		flush := func() {
			if len(seg) > 1 {
				fmt.Fprintf(&b, `<polyline class="%s" points="%s"/>`, template.HTMLEscapeString(l.Class), strings.Join(seg, " "))
			} else if len(seg) == 1 {
				x, y, _ := strings.Cut(seg[0], ",")
				fmt.Fprintf(&b, `<circle class="%s" cx="%s" cy="%s" r="1.5"/>`, template.HTMLEscapeString(l.Class), x, y)
			}
			seg = seg[:0]
		}
		for i, p := range l.Points {
			if p == nil {
				flush()
				continue
			}
			x := float64(chartW) * float64(i) / float64(max(n-1, 1))
			y := float64(chartH) * (1 - *p/top)
			seg = append(seg, fmt.Sprintf("%.1f,%.1f", x, y))
		}
		flush()
	}
	b.WriteString(`</svg>`)
	return chart{Title: title, SVG: template.HTML(b.String()), Lines: lines, Max: top, Unit: unit}
}

// Empty reports whether no series has a point.
func (c chart) Empty() bool {
	for _, l := range c.Lines {
		for _, p := range l.Points {
			if p != nil {
				return false
			}
		}
	}
	return true
}

// minWindow is the shortest time a chart over time spans, so that a fleet a
// few minutes old still gets a readable time axis.
const minWindow = 10 * time.Minute

// timeChart draws lines whose points lie step apart and end now. It spans
// from the first point any line has (at least minWindow, at most all the
// points), not the whole history kept: a fleet started 12 minutes ago fills
// the chart instead of its last sliver. The title names the span after
// what ("The fleet's GPUs, last 12 min: ...").
func timeChart(what, measures, unit string, top float64, step time.Duration, lines ...line) chart {
	lines, span := fitWindow(step, lines)
	label := spanLabel(span)
	c := newChart(fmt.Sprintf("%s, last %s: %s", what, label, measures), unit, top, lines...)
	for k := 4; k >= 0; k-- {
		if k == 0 {
			c.Ticks = append(c.Ticks, "now")
		} else {
			c.Ticks = append(c.Ticks, spanLabel(span*time.Duration(k)/4)+" ago")
		}
	}
	return c
}

// fitWindow cuts the lines to the points from the first one any line has,
// keeping at least minWindow of them, and says how long they span.
func fitWindow(step time.Duration, lines []line) ([]line, time.Duration) {
	n := 0
	for _, l := range lines {
		n = max(n, len(l.Points))
	}
	first := n
	for _, l := range lines {
		for i, p := range l.Points {
			if p != nil {
				first = min(first, i)
				break
			}
		}
	}
	keep := n - first
	if step > 0 {
		keep = max(keep, int(minWindow/step)+1)
	}
	keep = min(max(keep, 2), n)
	out := make([]line, len(lines))
	for i, l := range lines {
		out[i] = l
		out[i].Points = l.Points[max(len(l.Points)-keep, 0):]
	}
	return out, time.Duration(max(keep-1, 0)) * step
}

// spanLabel is a span of time as an axis names it: "12 min", "6 h",
// "2 h 30 min".
func spanLabel(d time.Duration) string {
	return strings.TrimSuffix(duration(d.Seconds()), " 0 min")
}
