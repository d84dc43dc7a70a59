package config

import (
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestWebhooksConfig(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	secretFile := filepath.Join(dir, "ops.secret")
	if err := os.WriteFile(secretFile, []byte("0123456789abcdef-from-file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, _, err := loadO(t, `[webhook_delivery]
timeout = "3s"
allow_networks = ["127.0.0.1/32", "10.9.0.0/16"]

[[webhooks]]
name = "ops"
url = "https://hooks.example.com/services/T0/B0/tok"
events = ["job.failed", "worker.*"]
format = "slack"
secret_file = "`+secretFile+`"

[[webhooks]]
name = "ci"
url = "http://127.0.0.1:9000/hook"
events = ["*"]
team = "default"
secret = "an-inline-secret-of-some-length"
`, env())
	if err != nil {
		t.Fatal(err)
	}
	d := c.WebhookDelivery
	if d.Timeout.Duration != 3*time.Second || d.RetryFor.Duration != 24*time.Hour || d.Concurrency != 8 || d.AllowLocal {
		t.Fatalf("webhook_delivery %+v", d)
	}
	g := d.WebhookGuard()
	if g.Refuses(netip.MustParseAddr("127.0.0.1")) != "" || g.Refuses(netip.MustParseAddr("127.0.0.2")) == "" {
		t.Fatalf("guard %+v: allow_networks not applied", g)
	}
	if len(c.Webhooks) != 2 || c.Webhooks[0].Secret.Value() != "0123456789abcdef-from-file" || c.Webhooks[1].Team != "default" {
		t.Fatalf("webhooks %+v", c.Webhooks)
	}
	for _, s := range []string{c.Redacted(), c.Webhooks[0].String(), c.Webhooks[1].String()} {
		if strings.Contains(s, "from-file") || strings.Contains(s, "inline-secret") {
			t.Fatalf("a secret is shown:\n%s", s)
		}
	}
	// --check-config prints of a webhook URL only its origin: the path of
	// a Slack URL is its token.
	if r := c.Redacted(); strings.Contains(r, "/services/T0") || !strings.Contains(r, `url = "https://hooks.example.com/<redacted>"`) {
		t.Fatalf("--check-config shows the webhook URL as:\n%s", r)
	}
	if c.Webhooks[0].URL != "https://hooks.example.com/services/T0/B0/tok" {
		t.Fatalf("Redacted changed the configuration: %s", c.Webhooks[0].URL)
	}
	// What a reload logs of a changed entry leaves out the URL's path,
	// which may hold a secret too.
	if s := c.Webhooks[0].String(); strings.Contains(s, "/services/T0") || !strings.Contains(s, "https://hooks.example.com") {
		t.Fatalf("entry shown as %s", s)
	}
}

// Every mistake in a [[webhooks]] entry is named, at the entry's line.
func TestWebhooksConfigErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ toml, want string }{
		{"[webhook_delivery]\nconcurrency = 0\n", "o.toml:2: key webhook_delivery.concurrency: must be from 1 to 1024"},
		{"[webhook_delivery]\nbackoff_min = \"1m\"\nbackoff_max = \"10s\"\n", "key webhook_delivery.backoff_max: must not be shorter than backoff_min"},
		{"[webhook_delivery]\nallow_networks = [\"10.0.0.0\"]\n", `o.toml:2: key webhook_delivery.allow_networks: entry 1: "10.0.0.0" is not a network in CIDR notation`},
		{"[webhook_delivery]\nallow_networks = [\"127.0.0.1/32:8080\", \"10.0.0.0/8:99999\"]\n",
			`key webhook_delivery.allow_networks: entry 2: "10.0.0.0/8:99999": the port must be a number from 1 to 65535, got "99999"`},
		{entry(`url = "https://x.example:99999/hook"`), "entry 1: url: the port must be from 1 to 65535, got 99999"},
		{"[webhook_delivery]\nmax_pending = 5\n", "o.toml:2: key webhook_delivery.max_pending: must be from 10 to 1000000, got 5"},
		{"[webhook_delivery]\nmax_subscriptions = 0\n", "key webhook_delivery.max_subscriptions: must be from 1 to 10000, got 0"},
		{"[webhook_delivery]\nmax_subscriptions = 1\n" + entry(`name = "a"`) + entry(`name = "b"`),
			"key webhooks: 2 entries, more than webhook_delivery.max_subscriptions (1)"},
		{"[webhook_delivery]\nretry_for = \"0s\"\n", "key webhook_delivery.retry_for: must be greater than 0"},
		{entry(`url = "ftp://x.example/"`), `o.toml:2: key webhooks: entry 1: url: the scheme must be http or https, not "ftp"`},
		{entry(`url = "https://169.254.169.254/latest"`), "entry 1: url: 169.254.169.254 is a link-local address"},
		{entry(`url = "http://[::1]:80/"`), "entry 1: url: ::1 is a loopback address"},
		{entry(`url = "https://u:p@x.example/"`), "entry 1: url: the URL must not hold credentials"},
		{entry(`events = ["job.exploded"]`), `entry 1: events: unknown event "job.exploded"; events are job.queued`},
		{entry(`events = []`), `entry 1: events: list at least one event`},
		{entry(`format = "xml"`), `entry 1: format: unknown format "xml"`},
		{entry(`team = "vision"`), `entry 1: team: unknown team "vision"`},
		{entry(`name = "a b"`), `entry 1: name: name "a b": only letters`},
		{entry(`secret = "short"`), "entry 1: the secret must be at least 16 characters, got 5"},
		{entry(`secret = ""`), "entry 1: a secret is required"},
		{entry(`secret_file = "/nonexistent/x"`), "entry 1: set either secret or secret_file, not both"},
		{entry(`colour = "red"`), `entry 1: unknown key "colour"`},
		{entry("") + entry(""), `o.toml:8: key webhooks: entry 2: name "hook" is used by an earlier entry`},
	} {
		_, _, err := loadO(t, tc.toml, env())
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q:\n got  %v\n want %q", tc.toml, err, tc.want)
		}
	}
}

// entry is a valid [[webhooks]] entry (after a blank line), with one line
// replaced or added: a key given in line wins over the default one.
func entry(line string) string {
	keys := []string{`name = "hook"`, `url = "https://hooks.example.com/x"`, `events = ["*"]`, `secret = "0123456789abcdef"`}
	out := "\n[[webhooks]]\n"
	k, _, _ := strings.Cut(line, " =")
	for _, kv := range keys {
		if dk, _, _ := strings.Cut(kv, " ="); dk == k && k != "secret_file" {
			continue
		}
		out += kv + "\n"
	}
	if line != "" {
		out += line + "\n"
	}
	return out
}

// [webhook_delivery] and [[webhooks]] entries of any shape load into errors,
// never a panic, and a secret never shows in what is printed.
func FuzzWebhooksConfig(f *testing.F) {
	f.Add([]byte("[webhook_delivery]\nallow_networks = [\"127.0.0.1/32\"]\n[[webhooks]]\nname = \"a\"\nurl = \"https://x.example/\"\nevents = [\"*\"]\nsecret = \"0123456789abcdef-fuzz\"\n"))
	f.Add([]byte("[[webhooks]]\nname = 1\nevents = \"job.*\"\nsecret_file = 2\n[[webhooks]]\n"))
	f.Add([]byte("webhooks = [1, 2]\n[webhook_delivery]\nconcurrency = -1\nallow_networks = [\"::/0\", \"x\"]\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		c := DefaultOrchestrator()
		l := newLoader(c)
		l.decodeTOML("fuzz.toml", data)
		c.validate(l)
		out := c.Redacted()
		for _, w := range c.Webhooks {
			if len(w.Secret) >= 8 && strings.Contains(out, w.Secret.Value()) && w.Secret.Value() != redacted {
				t.Fatalf("secret %q printed", w.Secret.Value())
			}
			_ = w.String()
		}
		_ = c.WebhookDelivery.WebhookGuard()
		for _, e := range l.errs {
			_ = e.Error()
		}
	})
}
