package ctle2e

import (
	"encoding/json"
	"strings"
	"testing"

	. "github.com/simpletuner/simpletuner-orchestration/test/e2e/e2etest"
)

// worker create locks a new worker's labels and GPU inventory unless told
// --unlocked; worker labels --unlock / --lock change it later.
func TestWorkerCreateLocksByDefault(t *testing.T) {
	t.Parallel()
	o := StartOrchestrator(t, "")
	c := overTCP(t, o)
	created := func(args ...string) map[string]any {
		t.Helper()
		r := c.ok(append([]string{"worker", "create"}, append(args, "-o", "json")...)...)
		var m map[string]any
		if err := json.Unmarshal([]byte(r.Stdout), &m); err != nil {
			t.Fatalf("worker create -o json: %v\n%s", err, r.Stdout)
		}
		c.secrets = append(c.secrets, m["token"].(string))
		return m
	}
	if m := created("locked-one"); m["labels_locked"] != true {
		t.Errorf("worker create without --unlocked: labels_locked %v", m["labels_locked"])
	}
	if m := created("open-one", "--unlocked"); m["labels_locked"] != false {
		t.Errorf("worker create --unlocked: labels_locked %v", m["labels_locked"])
	}
	r := c.ok("worker", "create", "said-so", "--label", "pool=a")
	mustContain(t, "worker create", r.Stdout, "labels and GPU inventory locked")
	if _, tok, ok := strings.Cut(r.Stdout, "token (shown only once): "); ok {
		c.secrets = append(c.secrets, strings.Fields(tok)[0])
	}

	show := func() map[string]any {
		var m map[string]any
		if err := json.Unmarshal([]byte(c.ok("worker", "show", "said-so", "-o", "json").Stdout), &m); err != nil {
			t.Fatal(err)
		}
		return m
	}
	c.ok("worker", "labels", "said-so", "--unlock")
	if m := show(); m["labels_locked"] != false {
		t.Errorf("after worker labels --unlock: %v", m["labels_locked"])
	}
	c.ok("worker", "labels", "said-so", "--lock", "team=x")
	if m := show(); m["labels_locked"] != true || m["labels"].(map[string]any)["team"] != "x" {
		t.Errorf("after worker labels --lock team=x: %v %v", m["labels_locked"], m["labels"])
	}
	c.want(2, "worker", "labels", "said-so", "--lock", "--unlock")
}
