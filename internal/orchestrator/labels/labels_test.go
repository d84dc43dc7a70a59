package labels

import (
	"maps"
	"strings"
	"testing"
)

func TestPlacement(t *testing.T) {
	t.Parallel()
	current := map[string]string{"zone": "a", "gpu": "old"}
	admin := map[string]string{"team": "nlp"}
	reported := map[string]string{"gpu": "h100", "team": "cv"}
	// Reported labels lay over the current ones; an admin's key wins.
	if got, want := Placement(current, admin, reported, false), map[string]string{"zone": "a", "gpu": "h100", "team": "nlp"}; !maps.Equal(got, want) {
		t.Errorf("unlocked: %v; want %v", got, want)
	}
	// Locked: the admin's alone, as a copy.
	got := Placement(current, admin, reported, true)
	if !maps.Equal(got, admin) {
		t.Errorf("locked: %v; want %v", got, admin)
	}
	got["x"] = "y"
	if _, ok := admin["x"]; ok {
		t.Error("the locked labels share the admin's map")
	}
	if got := Reported(map[string]string{"gpu": "h100", "team": "nlp"}, admin); !maps.Equal(got, map[string]string{"gpu": "h100"}) {
		t.Errorf("reported part: %v", got)
	}
	if Copy(nil) == nil {
		t.Error("Copy(nil) is nil")
	}
}

func TestValidNamesTheField(t *testing.T) {
	t.Parallel()
	if err := Valid("labels", map[string]string{"ok": "yes"}); err != nil {
		t.Fatal(err)
	}
	if err := Valid("admin_labels", map[string]string{"bad key\n": "v"}); err == nil || !strings.Contains(err.Error(), "admin_labels") {
		t.Errorf("a control character in a key: %v", err)
	}
}
