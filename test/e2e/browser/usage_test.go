package browser

import (
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	. "github.com/simpletuner/simpletuner-orchestration/test/e2e/e2etest"
)

// teamsTOML configures two teams beside the default one.
const teamsTOML = `[[teams]]
name = "vision"
share = 3
max_gpus = 8
borrow = true

[[teams]]
name = "nlp"
share = 1
max_queued = 10
`

// The usage page, reached from the navigation: a row per team with its
// share and limits, the per-day GPU-hours below; no console problem.
func TestUsageInABrowser(t *testing.T) {
	o := StartOrchestratorWith(t, OrchOptions{ExtraTOML: teamsTOML})
	b := newTab(t, o.URL, 1280, 900)
	b.open("/ui/signin")
	b.run(chromedp.SendKeys(css(`#token`), o.Admin), chromedp.Submit(css(`#token`)),
		chromedp.WaitVisible(css(`[data-count="workers-total"]`)))

	b.run(chromedp.Click(css(`nav a[href="/ui/usage"]`)), chromedp.WaitVisible(css(`tr[data-team="vision"]`)))
	row := b.text(`tr[data-team="vision"]`)
	// 3 of 4 shares: the default team, not named in [[teams]], has none.
	for _, want := range []string{"vision", "75%", "8 borrows", "1.000"} {
		if !strings.Contains(row, want) {
			t.Errorf("the vision row %q lacks %q", row, want)
		}
	}
	if got := b.text(`tr[data-team="nlp"] td[data-label="Max queued"]`); got != "10" {
		t.Errorf("nlp's queue limit reads %q", got)
	}
	if n := b.eval(`String(document.querySelectorAll('table.usage-days tbody tr').length)`); n != "7" {
		t.Errorf("%s days shown, want the last 7", n)
	}
	if b.eval(`document.querySelector('nav a[aria-current="page"]').textContent`) != "Usage" {
		t.Error("the navigation does not mark Usage as the current page")
	}
	b.shot("usage")
	b.noProblems()
}
