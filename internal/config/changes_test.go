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
