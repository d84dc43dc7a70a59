package browser

import (
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	. "github.com/simpletuner/simpletuner-orchestration/test/e2e/e2etest"
)

// A webhook made in the dashboard: the events picked with checkboxes, the
// secret shown once, the delivery log filling as a job is submitted and
// cancelled; no console problem on the way (the pages run under the CSP).
func TestWebhooksInABrowser(t *testing.T) {
	o := StartOrchestratorWith(t, OrchOptions{ExtraTOML: WebhookTOML})
	rc := StartReceiver(t, "")
	b := newTab(t, o.URL, 1280, 900)
	b.open("/ui/signin")
	b.run(chromedp.SendKeys(css(`#token`), o.Admin), chromedp.Submit(css(`#token`)),
		chromedp.WaitVisible(css(`[data-count="workers-total"]`)))

	b.open("/ui/webhooks")
	b.run(chromedp.Click(css(`#add-webhook summary`)),
		chromedp.SendKeys(css(`#h-name`), "browser-hook"),
		chromedp.SendKeys(css(`#h-url`), rc.URL),
		chromedp.Click(css(`input[name=events][value="job.queued"]`)),
		chromedp.Click(css(`input[name=events][value="job.cancelled"]`)))
	b.shot("webhooks-add")
	b.run(chromedp.Click(css(`#add-webhook button[type=submit]`)),
		chromedp.WaitVisible(css(`#secret-value`)))
	secret := b.value(`#secret-value`)
	if !strings.HasPrefix(secret, "whsec_") {
		t.Fatalf("secret %q", secret)
	}
	rc.SetSecret(secret)
	if b.eval(`document.querySelector('button[data-copy="secret-value"]').hidden`) != "false" {
		t.Fatal("the copy button stayed hidden")
	}

	id := o.Submit(map[string]any{"model_type": "lora"}, nil)
	if code, _ := o.Do("POST", "/api/queue/"+id+"/cancel", nil); code != 200 {
		t.Fatal("cancel")
	}
	rc.WaitAccepted(2, 30*time.Second)
	Eventually(t, 30*time.Second, "both delivered in the log", func() bool {
		b.open("/ui/webhooks/browser-hook")
		return b.eval(`String(document.querySelectorAll('.deliveries .d-delivered').length)`) == "2"
	})
	if strings.Contains(b.eval(`document.documentElement.outerHTML`), secret) {
		t.Fatal("the webhook page shows the secret again")
	}
	b.shot("webhook")
	b.noProblems()
}
