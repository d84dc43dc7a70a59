package config

import (
	"os"
	"reflect"
	"regexp"
	"strings"
	"testing"
)

// The packaged files must load cleanly, spell out every key, and hold the
// built-in defaults.
func TestPackagedFiles(t *testing.T) {
	t.Parallel()
	o, _, err := LoadOrchestrator([]string{"--config", "../../etc/orchestratord.toml"}, env())
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(values(o), DefaultOrchestrator()) {
		t.Errorf("etc/orchestratord.toml differs from the defaults:\n%s", o.Redacted())
	}
	w, _, err := LoadWorker([]string{"--config", "../../etc/workerd.toml"}, env())
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(valuesW(w), DefaultWorker()) {
		t.Errorf("etc/workerd.toml differs from the defaults:\n%s", w.Redacted())
	}
	// Setting these makes the worker overrule the admin's worker type and
	// the orchestrator's cancel grace; the packaged file must leave both to
	// the orchestrator.
	for _, key := range []string{"worker.persistent", "job.cancel_grace"} {
		if at := w.Origin(key); at != "" {
			t.Errorf("etc/workerd.toml sets %s at %s", key, at)
		}
	}
	checkAllKeys(t, "../../etc/orchestratord.toml", OrchestratorKeys())
	checkAllKeys(t, "../../etc/workerd.toml", WorkerKeys())
}

func checkAllKeys(t *testing.T, path string, keys []string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	// A key whose default cannot be written (worker.max_jobs: unset means one
	// job per GPU) or that is an empty array of tables is shown commented
	// out, as an example: "# max_jobs = 4", "# [[gpu.devices]]".
	example := regexp.MustCompile(`(?m)^#\s?(\[\[[a-z_.]+\]\]|[a-z_]+ = .*)$`)
	lines := keyLines(example.ReplaceAllString(string(b), "$1"))
	for _, k := range keys {
		if _, ok := lines[k]; !ok {
			t.Errorf("%s: key %s missing", path, k)
		}
	}
	// Every key line is preceded by a comment line explaining it (or shares
	// the comment of the key just above).
	text := strings.Split(string(b), "\n")
	keyRe := regexp.MustCompile(`^[a-z_]+ =`)
	for i, line := range text {
		if keyRe.MatchString(line) && i > 0 && strings.TrimSpace(text[i-1]) == "" {
			t.Errorf("%s:%d: %q has no comment", path, i+1, line)
		}
	}
}
