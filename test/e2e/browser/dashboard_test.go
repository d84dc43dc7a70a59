// Package browser drives the web dashboard in a real browser (Debian's
// chromium, through the DevTools protocol with chromedp) against the real
// simpletuner-orchestratord and simpletuner-workerd binaries running the demo
// trainer. Nothing is downloaded: without /usr/bin/chromium the tests skip.
//
// SIMPLETUNER_SCREENSHOTS=1 also saves a PNG of each page under
// docs/screenshots/ (kept in the repository for docs/dashboard.md).
package browser

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	. "github.com/simpletuner/simpletuner-orchestration/test/e2e/e2etest"
)

func TestMain(m *testing.M) { Main(m) }

// chromiumPath finds Debian's chromium (CI installs it from apt).
func chromiumPath(t *testing.T) string {
	for _, p := range []string{os.Getenv("SIMPLETUNER_CHROMIUM"), "/usr/bin/chromium", "/usr/bin/chromium-browser"} {
		if p == "" {
			continue
		}
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	t.Skip("chromium is not installed (apt-get install chromium); the dashboard's browser tests need it")
	return ""
}

// tab is one browser tab plus the console problems it reported.
type tab struct {
	t    *testing.T
	ctx  context.Context
	base string
	mu   sync.Mutex
	// problems are JavaScript exceptions and console errors (a CSP violation
	// is reported as one), which must never happen.
	problems []string
}

func newTab(t *testing.T, base string, width, height int) *tab {
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromiumPath(t)),
		chromedp.NoSandbox, // tests may run as root, where chromium's sandbox refuses to start
		chromedp.WindowSize(width, height),
		chromedp.Flag("disable-extensions", true),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelCtx := chromedp.NewContext(actx)
	t.Cleanup(func() { cancelCtx(); cancelAlloc() })
	tb := &tab{t: t, ctx: ctx, base: base}
	messages := chromedp.Console(ctx)
	go func() {
		for m, err := range messages {
			if err != nil {
				return
			}
			// Expected: a 401 that sends an expired page to sign in, a log
			// stream cut when the page is left.
			if (m.Type == chromedp.ConsoleError || m.IsException()) && !strings.Contains(m.Text+m.URL, "favicon") &&
				!strings.Contains(m.Text, "status of 401") && !strings.Contains(m.Text, "ERR_INCOMPLETE_CHUNKED_ENCODING") {
				tb.problem(m.String() + " (" + m.URL + ")")
			}
		}
	}()
	return tb
}

func (b *tab) problem(s string) {
	b.mu.Lock()
	b.problems = append(b.problems, s)
	b.mu.Unlock()
}

func (b *tab) noProblems() {
	b.t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.problems) > 0 {
		b.t.Fatalf("the browser reported problems:\n%s", strings.Join(b.problems, "\n"))
	}
}

// run performs the steps, each limited to a minute.
func (b *tab) run(steps ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, time.Minute)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		b.t.Fatalf("browser: %v", err)
	}
}

func (b *tab) open(path string) { b.t.Helper(); b.run(chromedp.Navigate(b.base + path)) }

func css(sel string) chromedp.CSS { return chromedp.CSS(sel) }

// value is an input's value.
func (b *tab) value(sel string) string {
	b.t.Helper()
	v, err := chromedp.Run(b.ctx, chromedp.Value(css(sel)))
	if err != nil {
		b.t.Fatalf("value of %s: %v", sel, err)
	}
	return v
}

// eval returns the value of a JavaScript expression in the page.
func (b *tab) eval(expr string) string {
	out, err := chromedp.Run(b.ctx, chromedp.Evaluate[any](expr))
	if err != nil {
		return ""
	}
	switch v := out.(type) {
	case string:
		return v
	case nil:
		return ""
	default:
		j, _ := json.Marshal(v)
		return string(j)
	}
}

// text is the text of the first element matching a CSS selector ("" if none).
func (b *tab) text(sel string) string {
	q, _ := json.Marshal(sel)
	return b.eval(fmt.Sprintf(`(function(){var e=document.querySelector(%s);return e?e.textContent:""})()`, q))
}

// waitText waits until the element's text contains want.
func (b *tab) waitText(sel, want string, timeout time.Duration) {
	b.t.Helper()
	Eventually(b.t, timeout, fmt.Sprintf("%s to show %q (it shows %q)", sel, want, b.text(sel)), func() bool {
		return strings.Contains(b.text(sel), want)
	})
}

func (b *tab) path() string { return b.eval(`location.pathname + location.search`) }

// shot saves a full-page PNG under docs/screenshots when asked to.
func (b *tab) shot(name string) { b.t.Helper(); b.capture(name, chromedp.FullScreenshot(100)) }

// shotViewport saves what the (emulated) screen shows.
func (b *tab) shotViewport(name string) { b.t.Helper(); b.capture(name, chromedp.CaptureScreenshot()) }

func (b *tab) capture(name string, how chromedp.Action[[]byte]) {
	b.t.Helper()
	if os.Getenv("SIMPLETUNER_SCREENSHOTS") != "1" {
		return
	}
	png, err := chromedp.Run(b.ctx, how)
	if err != nil {
		b.t.Fatal(err)
	}
	dir := filepath.Join(repoRoot(b.t), "docs", "screenshots")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		b.t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name+".png"), png, 0o644); err != nil {
		b.t.Fatal(err)
	}
}

func repoRoot(t *testing.T) string {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Dir(strings.TrimSpace(string(out)))
}

// The whole tour of issue 18: sign in, create a worker and read its token
// once, start that worker with it, submit a job from the form and watch it
// complete with its log arriving live, cancel a second job, drain and resume
// the worker, verify the audit chain, sign out.
func TestDashboardInABrowser(t *testing.T) {
	o := StartOrchestrator(t, "")
	if err := os.MkdirAll(filepath.Join(o.Dir, "configs"), 0o755); err != nil {
		t.Fatal(err)
	}
	// About 6 s of training, one log line per step.
	os.WriteFile(filepath.Join(o.Dir, "configs", "demo-lora.json"), []byte(`{"model_type": "lora", "steps": 30, "step_seconds": 0.2}`), 0o644)
	b := newTab(t, o.URL, 1280, 900)

	// Sign in: "/" goes to the dashboard, which asks for a token first.
	b.open("/")
	b.run(chromedp.WaitVisible(css(`#token`)))
	if p := b.path(); !strings.HasPrefix(p, "/ui/signin") {
		t.Fatalf("not at sign-in: %s", p)
	}
	b.shot("signin")
	b.run(chromedp.SendKeys(css(`#token`), "sta_wrong"), chromedp.Submit(css(`#token`)),
		chromedp.WaitVisible(css(`#token-error`)))
	b.run(chromedp.SendKeys(css(`#token`), o.Admin), chromedp.Submit(css(`#token`)),
		chromedp.WaitVisible(css(`[data-count="workers-total"]`)))

	// Create a worker; its token is shown once.
	b.open("/ui/workers")
	b.run(chromedp.Click(css(`#add-worker summary`)),
		chromedp.SendKeys(css(`#w-name`), "browser-gpu"),
		chromedp.SendKeys(css(`#w-labels`), "zone=lab\ngpu_type=none"),
		chromedp.Click(css(`#add-worker button[type=submit]`)),
		chromedp.WaitVisible(css(`#token-value`)))
	token := b.value(`#token-value`)
	workerHref := b.eval(`document.querySelector('a[href^="/ui/workers/w_"]').getAttribute('href')`)
	if !strings.HasPrefix(token, "wt_") || workerHref == "" {
		t.Fatalf("token %q, worker link %q", token, workerHref)
	}
	if b.eval(`document.querySelector('button[data-copy="token-value"]').hidden`) != "false" {
		t.Fatal("the copy button stayed hidden")
	}
	workerID := strings.TrimPrefix(workerHref, "/ui/workers/")
	b.shot("worker-created")
	// Reading the worker again never shows the token.
	b.open(workerHref)
	b.run(chromedp.WaitVisible(css(`#labels`)))
	if strings.Contains(b.eval(`document.documentElement.outerHTML`), token) {
		t.Fatal("the worker page shows the token again")
	}

	// Start a real workerd with the token the page showed.
	w := o.StartWorkerFor(workerID, token, WorkerSpec{Name: "browser-gpu", Persistent: true})
	b.open("/ui/workers")
	b.waitText(`tr[data-worker="`+workerID+`"] [data-status]`, "idle", 15*time.Second)
	b.waitText(`tr[data-worker="`+workerID+`"]`, "simpletuner-workerd", 5*time.Second)
	b.shot("workers")

	// Submit a job from the form with a config from the pick list; it
	// completes on the worker and its log arrives while it runs.
	b.open("/ui/queue")
	b.run(chromedp.Click(css(`#submit-job summary`)),
		chromedp.SetValue(css(`#j-config-name`), "demo-lora"),
		chromedp.Click(css(`#submit-job button[type=submit]`)),
		chromedp.WaitVisible(css(`#job-log`)))
	jobPath := b.path()
	if !strings.HasPrefix(jobPath, "/ui/jobs/j_") {
		t.Fatalf("submit went to %s", jobPath)
	}
	var sawPartial bool
	Eventually(t, 60*time.Second, "job completed with its whole log", func() bool {
		log := b.text(`#job-log`)
		status := b.text(`[data-job-status]`)
		if strings.Contains(log, "step 1/30") && !strings.Contains(log, "step 30/30") && status != "completed" {
			sawPartial = true // lines arrived while the job still ran
		}
		return status == "completed" && strings.Contains(log, "step 30/30") &&
			b.eval(`document.querySelector('#job-log').getAttribute('data-log-ended')`) == "true"
	})
	if !sawPartial {
		t.Fatal("the log never showed some lines before the job ended: it is not live")
	}
	b.waitText(`.timeline`, "completed", 5*time.Second)
	b.shot("job")

	// A second job, pasted as JSON, cancelled from its page.
	b.open("/ui/queue")
	b.run(chromedp.Click(css(`#submit-job summary`)),
		chromedp.SendKeys(css(`#j-config-json`), `{"steps": 600, "step_seconds": 0.1}`),
		chromedp.Click(css(`#submit-job button[type=submit]`)),
		chromedp.WaitVisible(css(`#job-log`)))
	b.waitText(`[data-job-status]`, "running", 30*time.Second)
	b.run(chromedp.Click(css(`#job-live form button.danger`)), chromedp.WaitVisible(css(`p.flash`)))
	b.waitText(`[data-job-status]`, "cancelled", 30*time.Second)
	b.open("/ui/queue")
	b.run(chromedp.WaitVisible(css(`#queue-live`)))
	b.shot("queue")

	// Drain and resume the worker from the table.
	b.open("/ui/workers")
	row := `tr[data-worker="` + workerID + `"]`
	b.run(chromedp.Click(css(row+` form[action$="/drain"] button`)), chromedp.WaitVisible(css(`p.flash`)))
	b.waitText(row+` [data-status]`, "draining", 10*time.Second)
	b.run(chromedp.Click(css(row+` form[action$="/resume"] button`)), chromedp.WaitVisible(css(`p.flash`)))
	b.waitText(row+` [data-status]`, "idle", 10*time.Second)
	if st := o.Worker(workerID)["status"]; st != "idle" {
		t.Fatalf("worker after resume: %v", st)
	}

	// The overview counts it all.
	b.open("/ui/")
	b.waitText(`[data-count="jobs-completed-24h"]`, "1", 10*time.Second)
	b.shot("overview")

	// Verify the audit chain.
	b.open("/ui/audit")
	b.run(chromedp.Click(css(`form[action="/ui/audit/verify"] button`)), chromedp.WaitVisible(css(`[data-verify]`)))
	if v := b.eval(`document.querySelector('[data-verify]').getAttribute('data-verify')`); v != "ok" {
		t.Fatalf("audit chain: %s (%s)", v, b.text(`[data-verify]`))
	}
	b.shot("audit")

	// On a phone-sized screen the worker table scrolls inside its box, not the page.
	phone := newTab(t, o.URL, 1280, 900)
	phone.run(chromedp.EmulateViewport(390, 844, chromedp.EmulateMobile))
	phone.open("/ui/signin")
	phone.run(chromedp.SendKeys(css(`#token`), o.Admin), chromedp.Submit(css(`#token`)),
		chromedp.WaitVisible(css(`[data-count="workers-total"]`)))
	phone.open("/ui/workers")
	phone.run(chromedp.WaitVisible(css(`#workers-live`)))
	if wide := phone.eval(`String(document.documentElement.scrollWidth > window.innerWidth + 1)`); wide != "false" {
		t.Fatalf("the workers page is wider than a phone screen; too wide: %s", phone.eval(`Array.from(document.querySelectorAll('body *')).filter(e => e.getBoundingClientRect().right > window.innerWidth + 1 && !(e.parentElement && e.parentElement.closest('.table-wrap'))).slice(0, 8).map(e => e.tagName + '.' + e.className + ' ' + Math.round(e.getBoundingClientRect().right)).join(', ') + ' scrollWidth=' + document.documentElement.scrollWidth + ' innerWidth=' + window.innerWidth`))
	}
	phone.shotViewport("workers-phone")
	phone.noProblems()

	// Sign out: the session is gone and pages ask to sign in again.
	b.run(chromedp.Click(css(`form.signout button`)), chromedp.WaitVisible(css(`#token`)))
	b.open("/ui/workers")
	b.run(chromedp.WaitVisible(css(`#token`)))
	if p := b.path(); !strings.HasPrefix(p, "/ui/signin?next=%2Fui%2Fworkers") {
		t.Fatalf("after sign-out /ui/workers went to %s", p)
	}
	b.noProblems()
	if strings.Contains(o.P.Output(), token) || strings.Contains(o.P.Output(), o.Admin) || strings.Contains(w.P.Output(), o.Admin) {
		t.Fatal("a daemon logged a token")
	}
}
