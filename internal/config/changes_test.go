package config

import (
	"strings"
	"testing"
	"time"
)

func TestChangesNameEveryChangedKeyAndMaskSecrets(t *testing.T) {
	a, b := DefaultOrchestrator(), DefaultOrchestrator()
	if c := Changes(a, b); len(c) != 0 {
		t.Fatalf("identical configurations: %v", c)
	}
	b.Workers.HeartbeatTimeout = D(7 * time.Minute)
	b.Log.Level = "debug"
	b.Server.Listen = []string{"127.0.0.1:1"}
	b.Database.URL = Secret("postgres://u:hunter2@db/x")
	got := Changes(a, b)
	keys := []string{}
	for _, c := range got {
		keys = append(keys, c.Key)
		if strings.Contains(c.Old+c.New, "hunter2") {
			t.Errorf("%s prints the secret: %+v", c.Key, c)
		}
	}
	if want := "server.listen database.url workers.heartbeat_timeout log.level"; strings.Join(keys, " ") != want {
		t.Fatalf("changed keys %q, want %q", strings.Join(keys, " "), want)
	}
	for _, c := range got {
		if c.Key == "workers.heartbeat_timeout" && (c.Old == c.New || c.New != "7m") {
			t.Errorf("heartbeat_timeout change printed as %+v", c)
		}
	}
}

// [[teams]] print by their keys in the reload log, not as Go structs.
func TestChangesPrintTablesByTheirKeys(t *testing.T) {
	a, b := DefaultOrchestrator(), DefaultOrchestrator()
	a.Teams = []TeamConfig{{Name: "vision", Share: 1, MaxGPUs: 2, MaxQueued: 3}}
	b.Teams = []TeamConfig{{Name: "vision", Share: 1, MaxGPUs: 4, MaxQueued: 3}, {Name: "nlp", Share: 0.5, Borrow: true}}
	got := Changes(a, b)
	if len(got) != 1 || got[0].Key != "teams" {
		t.Fatalf("changes %+v", got)
	}
	if want := "[vision(share=1, max_gpus=2, max_queued=3, borrow=false, max_priority=10)]"; got[0].Old != want {
		t.Errorf("old teams printed %q, want %q", got[0].Old, want)
	}
	if want := "[vision(share=1, max_gpus=4, max_queued=3, borrow=false, max_priority=10), nlp(share=0.5, max_gpus=0, max_queued=0, borrow=true, max_priority=10)]"; got[0].New != want {
		t.Errorf("new teams printed %q, want %q", got[0].New, want)
	}
	a.Webhooks = []WebhookConfig{{Name: "ops", URL: "https://hooks.example/x", Secret: Secret("hunter2")}}
	for _, c := range Changes(a, b) {
		// The secret never, nor the URL's path (a Slack URL's path is its token).
		if strings.Contains(c.Old+c.New, "hunter2") || (c.Key == "webhooks" && !strings.HasPrefix(c.Old, "[ops(url=https://hooks.example/…, ")) {
			t.Errorf("%s printed %q -> %q", c.Key, c.Old, c.New)
		}
	}
}
