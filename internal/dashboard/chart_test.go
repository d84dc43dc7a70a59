package dashboard

import (
	"slices"
	"strings"
	"testing"
	"time"
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

// A chart over time spans the points it has (at least ten minutes), not
// the whole history kept, and labels its time axis.
func TestTimeChartFitsItsWindow(t *testing.T) {
	f := func(v float64) *float64 { return &v }
	points := make([]*float64, 360) // six hours, a minute apart
	for i := 360 - 30; i < 360; i++ {
		points[i] = f(2)
	}
	c := timeChart("The fleet's GPUs", "online", "GPUs", 1, time.Minute, line{Class: "online", Points: points})
	if got := len(c.Lines[0].Points); got != 30 {
		t.Errorf("the chart keeps %d points, want the 30 that have numbers", got)
	}
	if !strings.HasPrefix(c.Title, "The fleet's GPUs, last 29 min: online") {
		t.Errorf("title %q", c.Title)
	}
	if want := []string{"29 min ago", "21 min ago", "14 min ago", "7 min ago", "now"}; !slices.Equal(c.Ticks, want) {
		t.Errorf("ticks %q, want %q", c.Ticks, want)
	}
	// A fleet a minute old still gets the shortest window; a full history
	// spans all of it.
	points = make([]*float64, 360)
	points[359] = f(1)
	if c := timeChart("x", "y", "GPUs", 1, time.Minute, line{Points: points}); len(c.Lines[0].Points) != 11 || c.Ticks[0] != "10 min ago" {
		t.Errorf("a new fleet: %d points, ticks %q", len(c.Lines[0].Points), c.Ticks)
	}
	for i := range points {
		points[i] = f(1)
	}
	if c := timeChart("x", "y", "GPUs", 1, time.Minute, line{Points: points}); len(c.Lines[0].Points) != 360 || c.Ticks[0] != "5 h 59 min ago" {
		t.Errorf("a full history: %d points, ticks %q", len(c.Lines[0].Points), c.Ticks)
	}
}

func TestFormatSizeAndGPUs(t *testing.T) {
	for b, want := range map[float64]string{0: "0 B", 512: "512 B", 1126: "1.1 KiB", 3 << 30: "3.0 GiB", 5 << 40: "5.0 TiB", 2 << 50: "2048.0 TiB"} {
		if got := formatSize(b); got != want {
			t.Errorf("formatSize(%v) = %q, want %q", b, got, want)
		}
	}
	if got := formatGPUs([]int{0}); got != "GPU #0" {
		t.Errorf("one GPU: %q", got)
	}
	if got := formatGPUs([]int{1, 3}); got != "GPUs #1, #3" {
		t.Errorf("two GPUs: %q", got)
	}
}
