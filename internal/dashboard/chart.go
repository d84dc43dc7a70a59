package dashboard

import (
	"fmt"
	"html/template"
	"strings"
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

// chart is a chart ready for a template: the SVG and its legend.
type chart struct {
	Title string
	SVG   template.HTML
	Lines []line
	Max   float64
	Unit  string
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

// empty reports whether no series has a point.
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
