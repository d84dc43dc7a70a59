package checkpoint

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
)

func TestParse(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		ok   bool
		step int64
		suf  string
	}{
		{"checkpoint-100", true, 100, ""},
		{"checkpoint-0", true, 0, ""},
		{"checkpoint-500-rolling", true, 500, "rolling"},
		{"checkpoint-500-tmp", false, 0, ""},
		{"checkpoint-500-rolling-tmp", false, 0, ""},
		{"checkpoint-500tmp", false, 0, ""},
		{"checkpoint-", false, 0, ""},
		{"checkpoint-x", false, 0, ""},
		{"checkpoint-12-", false, 0, ""},
		{"checkpoint-12-a b", false, 0, ""},
		{"checkpoint-12-a-b", false, 0, ""},
		{"checkpoint-+12", false, 0, ""},
		{"checkpoint-99999999999999999999", false, 0, ""},
		{"checkpoints", false, 0, ""},
		{"model.safetensors", false, 0, ""},
	} {
		d, ok := Parse(c.name)
		if ok != c.ok || d.Step != c.step || d.Suffix != c.suf {
			t.Errorf("Parse(%q) = %+v %v, want step %d suffix %q ok %v", c.name, d, ok, c.step, c.suf, c.ok)
		}
	}
}

func entries(specs ...string) []Entry {
	var out []Entry
	for _, s := range specs {
		name, guard := strings.CutSuffix(s, "+guard")
		d, ok := Parse(name)
		if !ok {
			panic(name)
		}
		out = append(out, Entry{Dir: d, Guarded: guard})
	}
	return out
}

func names(ds []Dir) []string {
	out := []string{}
	for _, d := range ds {
		out = append(out, d.Name)
	}
	return out
}

func TestTrackerGuardedTrainer(t *testing.T) {
	t.Parallel()
	tr := NewTracker()
	if got := tr.Look(nil, false); len(got) != 0 {
		t.Fatal(got)
	}
	// Being written: no guard yet, nothing else.
	if got := names(tr.Look(entries("checkpoint-10"), false)); len(got) != 0 {
		t.Errorf("a checkpoint being written was finished: %v", got)
	}
	if got := names(tr.Look(entries("checkpoint-10+guard"), false)); !slices.Equal(got, []string{"checkpoint-10"}) {
		t.Errorf("guarded: %v", got)
	}
	// The next one is being written: the guard-writing trainer's unguarded
	// directory is never finished, not even by a later one or the exit.
	got := names(tr.Look(entries("checkpoint-10+guard", "checkpoint-20", "checkpoint-30+guard"), true))
	if !slices.Equal(got, []string{"checkpoint-30", "checkpoint-10"}) {
		t.Errorf("with guards: %v", got)
	}
}

func TestTrackerUnguardedTrainer(t *testing.T) {
	t.Parallel()
	tr := NewTracker()
	// checkpoint-50 was left by an earlier attempt: never finished without a guard.
	tr.Look(entries("checkpoint-50"), false)
	if got := names(tr.Look(entries("checkpoint-50", "checkpoint-10"), false)); len(got) != 0 {
		t.Errorf("the only new checkpoint was finished: %v", got)
	}
	// checkpoint-20 started after checkpoint-10: 10 is finished; 50, older, is not.
	got := names(tr.Look(entries("checkpoint-50", "checkpoint-10", "checkpoint-20"), false))
	if !slices.Equal(got, []string{"checkpoint-10"}) {
		t.Errorf("a later checkpoint appeared: %v", got)
	}
	// Two new ones seen in the same look: the lower was written first.
	got = names(tr.Look(entries("checkpoint-50", "checkpoint-10", "checkpoint-20", "checkpoint-30", "checkpoint-40"), false))
	if !slices.Equal(got, []string{"checkpoint-30", "checkpoint-20", "checkpoint-10"}) {
		t.Errorf("two in one look: %v", got)
	}
	// The trainer exited 0: everything it wrote is finished, the leftover is not.
	got = names(tr.Look(entries("checkpoint-50", "checkpoint-40"), true))
	if !slices.Equal(got, []string{"checkpoint-40"}) {
		t.Errorf("after a clean exit: %v", got)
	}
}

func TestTrackerPrunedNameComesBackNew(t *testing.T) {
	t.Parallel()
	tr := NewTracker()
	tr.Look(nil, false)
	tr.Look(entries("checkpoint-10", "checkpoint-20"), false)
	tr.Look(entries("checkpoint-20"), false)
	// checkpoint-10 is written again after checkpoint-20 (a restarted run):
	// 20 does not finish it.
	if got := names(tr.Look(entries("checkpoint-20", "checkpoint-10"), false)); len(got) != 0 {
		t.Errorf("a rewritten lower checkpoint was finished: %v", got)
	}
}

func validCommit() protocol.CheckpointCommit {
	return protocol.CheckpointCommit{Name: "checkpoint-20", Step: 20, Keep: 2, Files: []protocol.CheckpointFile{
		{Path: "model.safetensors", Size: 10, SHA256: strings.Repeat("a", 64)},
		{Path: "sub/optimizer.bin", Size: 0, SHA256: strings.Repeat("0", 64)},
	}}
}

func TestValidateCommit(t *testing.T) {
	t.Parallel()
	if err := ValidateCommit(validCommit()); err != nil {
		t.Fatal(err)
	}
	for what, mod := range map[string]func(c *protocol.CheckpointCommit){
		"bad name":      func(c *protocol.CheckpointCommit) { c.Name = "ckpt-20" },
		"tmp name":      func(c *protocol.CheckpointCommit) { c.Name = "checkpoint-20-tmp" },
		"step mismatch": func(c *protocol.CheckpointCommit) { c.Step = 21 },
		"keep 0":        func(c *protocol.CheckpointCommit) { c.Keep = 0 },
		"keep huge":     func(c *protocol.CheckpointCommit) { c.Keep = MaxKeep + 1 },
		"no files":      func(c *protocol.CheckpointCommit) { c.Files = nil },
		"absolute":      func(c *protocol.CheckpointCommit) { c.Files[0].Path = "/etc/passwd" },
		"dotdot":        func(c *protocol.CheckpointCommit) { c.Files[0].Path = "a/../b" },
		"dot":           func(c *protocol.CheckpointCommit) { c.Files[0].Path = "./b" },
		"empty seg":     func(c *protocol.CheckpointCommit) { c.Files[0].Path = "a//b" },
		"backslash":     func(c *protocol.CheckpointCommit) { c.Files[0].Path = `a\b` },
		"control":       func(c *protocol.CheckpointCommit) { c.Files[0].Path = "a\nb" },
		"twice":         func(c *protocol.CheckpointCommit) { c.Files[1].Path = c.Files[0].Path },
		"inside a file": func(c *protocol.CheckpointCommit) { c.Files[1].Path = "model.safetensors/x" },
		"negative":      func(c *protocol.CheckpointCommit) { c.Files[0].Size = -1 },
		"short sha":     func(c *protocol.CheckpointCommit) { c.Files[0].SHA256 = "abc" },
		"upper sha":     func(c *protocol.CheckpointCommit) { c.Files[0].SHA256 = strings.Repeat("A", 64) },
	} {
		c := validCommit()
		mod(&c)
		if err := ValidateCommit(c); err == nil {
			t.Errorf("%s: accepted", what)
		}
	}
}

func FuzzDecodeCommit(f *testing.F) {
	good, _ := json.Marshal(validCommit())
	f.Add(good)
	f.Add([]byte(`{"name":"checkpoint-1","step":1,"keep":1,"files":[{"path":"a","size":1,"sha256":"` + strings.Repeat("f", 64) + `"}]}`))
	f.Add([]byte(`{"files":[{"path":"a/b"},{"path":"a"}]}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := DecodeCommit(b)
		if err != nil {
			return
		}
		// What is accepted holds the promises callers build on.
		d, ok := Parse(c.Name)
		if !ok || d.Step != c.Step || len(c.Files) == 0 || c.Keep < 1 {
			t.Fatalf("accepted %+v", c)
		}
		for _, f := range c.Files {
			if f.Size < 0 || strings.Contains(f.Path, "..") && slices.Contains(strings.Split(f.Path, "/"), "..") ||
				strings.HasPrefix(f.Path, "/") || len(f.SHA256) != 64 {
				t.Fatalf("accepted file %+v", f)
			}
		}
	})
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{"checkpoint-1", "checkpoint-500-rolling", "checkpoint-1-tmp", "checkpoint--1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		d, ok := Parse(name)
		if !ok {
			return
		}
		if d.Step < 0 || d.Name != name || strings.HasSuffix(name, "tmp") || strings.ContainsAny(name, "/\\ \x00") {
			t.Fatalf("accepted %q as %+v", name, d)
		}
	})
}
