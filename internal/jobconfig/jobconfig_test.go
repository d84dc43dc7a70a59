package jobconfig

import (
	"encoding/json"
	"testing"
)

func TestSetFollowsTheConfigsKeyStyle(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ in, wantKey string }{
		{`{}`, "resume_from_checkpoint"},
		{`{"model_type":"lora"}`, "resume_from_checkpoint"},
		{`{"--model_type":"lora"}`, "--resume_from_checkpoint"},
		{`{"--model_type":"lora","resume_from_checkpoint":"latest"}`, "resume_from_checkpoint"},
		{`{"model_type":"lora","--resume_from_checkpoint":"latest"}`, "--resume_from_checkpoint"},
	} {
		var m map[string]any
		if err := json.Unmarshal(Set([]byte(c.in), "resume_from_checkpoint", "/j/out/checkpoint-4"), &m); err != nil {
			t.Fatal(err)
		}
		if m[c.wantKey] != "/j/out/checkpoint-4" {
			t.Errorf("%s: got %v, want key %s set", c.in, m, c.wantKey)
		}
		n := 0
		for k := range m {
			if k == "resume_from_checkpoint" || k == "--resume_from_checkpoint" {
				n++
			}
		}
		if n != 1 {
			t.Errorf("%s: %d spellings of the key left: %v", c.in, n, m)
		}
	}
	for _, in := range []string{`[1,2]`, `null`, `"x"`, `{`} {
		if got := Set([]byte(in), "k", "v"); string(got) != in {
			t.Errorf("Set(%s) = %s, want it unchanged", in, got)
		}
	}
}

func TestString(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		in   string
		want string
		ok   bool
	}{
		{`{"--output_dir":"out","output_dir":"other"}`, "out", true},
		{`{"output_dir":"out"}`, "out", true},
		{`{"output_dir":3}`, "", false},
		{`{}`, "", false},
		{`[]`, "", false},
	} {
		got, ok := String([]byte(c.in), "output_dir")
		if got != c.want || ok != c.ok {
			t.Errorf("String(%s) = %q %v, want %q %v", c.in, got, ok, c.want, c.ok)
		}
	}
}
