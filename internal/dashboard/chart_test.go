package dashboard

import (
	"strings"
	"testing"
)

// A series is drawn as polylines broken where a point is missing, scaled so
// its largest value (or the given top) is the top of the chart; labels are
// escaped.
func TestChartDrawsSegments(t *testing.T) {
	f := func(v float64) *float64 { return &v }
	c := newChart(`GPU <0> & "co"`, "GPUs", 1, line{Class: "util", Label: "in use", Points: []*float64{f(0), f(4), nil, f(2), nil, nil, f(8)}})
	svg := string(c.SVG)
	if c.Max != 8 || c.Empty() {
		t.Fatalf("max %v empty %v", c.Max, c.Empty())
	}
	for _, want := range []string{
		`<polyline class="util" points="0.0,80.0 60.0,40.0"/>`,
		`<circle class="util" cx="180.0" cy="60.0" r="1.5"/>`,
		`<circle class="util" cx="360.0" cy="0.0" r="1.5"/>`,
		`aria-label="GPU &lt;0&gt; &amp; &#34;co&#34;"`,
	} {
		if !strings.Contains(svg, want) {
			t.Errorf("chart lacks %s:\n%s", want, svg)
		}
	}
	if e := newChart("t", "%", 100, line{Class: "util", Points: []*float64{nil, nil}}); !e.Empty() || e.Max != 100 {
		t.Errorf("empty chart: empty %v max %v", e.Empty(), e.Max)
	}
}
