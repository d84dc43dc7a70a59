package config

import (
	"strings"
	"testing"
)

// A team's max_priority is the default priority unless an admin sets it,
// and must be a job's priority.
func TestTeamMaxPriority(t *testing.T) {
	t.Parallel()
	c, _, err := loadO(t, "[[teams]]\nname = \"nlp\"\nshare = 1\n\n[[teams]]\nname = \"vision\"\nshare = 1\nmax_priority = 30\n", env())
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Teams[0].PriorityLimit(); got != DefaultPriority {
		t.Errorf("nlp's limit without max_priority: %d, want the default priority %d", got, DefaultPriority)
	}
	if got := c.Teams[1].PriorityLimit(); got != 30 {
		t.Errorf("vision's limit: %d, want 30", got)
	}
	for _, bad := range []string{"51", "-1"} {
		_, _, err := loadO(t, "[[teams]]\nname = \"nlp\"\nshare = 1\nmax_priority = "+bad+"\n", env())
		want := "o.toml:1: key teams: entry 1: max_priority: must be from 0 to 50 (a job's priorities), got " + bad
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("max_priority = %s:\n got  %v\n want %q", bad, err, want)
		}
	}
}

// A reload names a changed max_priority by its value, not by a pointer.
func TestTeamChangesShowMaxPriority(t *testing.T) {
	t.Parallel()
	a, b := DefaultOrchestrator(), DefaultOrchestrator()
	thirty := 30
	a.Teams = []TeamConfig{{Name: "nlp", Share: 1}}
	b.Teams = []TeamConfig{{Name: "nlp", Share: 1, MaxPriority: &thirty}}
	c := Changes(a, b)
	if len(c) != 1 || c[0].Key != "teams" || !strings.Contains(c[0].Old, "max_priority=10") || !strings.Contains(c[0].New, "max_priority=30") {
		t.Fatalf("changes: %+v", c)
	}
}
