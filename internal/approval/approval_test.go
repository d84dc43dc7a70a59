package approval

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestMatchEveryCondition(t *testing.T) {
	base := Facts{GPUs: 2, ConfigName: "flux-lora", Team: "nlp", Config: json.RawMessage(`{"--max_train_steps": 1000}`),
		Submitter: "person:p_a", SubmittedEver: 3, SubmittedToday: 2, LargestWorkerGPUs: 8}
	with := func(edit func(*Facts)) Facts { f := base; edit(&f); return f }
	cases := []struct {
		name string
		cond Conditions
		f    Facts
		want string // "" when the rule does not hold the job
	}{
		{"gpus over", Conditions{GPUsOver: 1}, base, "asks for 2 GPUs, more than 1"},
		{"gpus at the limit", Conditions{GPUsOver: 2}, base, ""},
		{"whole worker counts the largest worker", Conditions{GPUsOver: 4}, with(func(f *Facts) { f.GPUs, f.WholeWorker = 0, true }), "asks for 8 GPUs, more than 4"},
		{"whole worker", Conditions{WholeWorker: true}, with(func(f *Facts) { f.GPUs, f.WholeWorker = 0, true }), "asks for a whole worker"},
		{"not whole worker", Conditions{WholeWorker: true}, base, ""},
		{"gpu-hours from steps", Conditions{GPUHoursOver: 1, SecondsPerStep: 3.6}, base, "an estimated 2 GPU-hours, more than 1"},
		{"gpu-hours under", Conditions{GPUHoursOver: 3, SecondsPerStep: 3.6}, base, ""},
		{"gpu-hours from the timeout", Conditions{GPUHoursOver: 1}, with(func(f *Facts) { f.TimeoutSeconds = 7200 }), "an estimated 4 GPU-hours, more than 1"},
		{"gpu-hours from a string step count", Conditions{GPUHoursOver: 1, SecondsPerStep: 3.6},
			with(func(f *Facts) { f.Config = json.RawMessage(`{"max_train_steps": "1000"}`) }), "an estimated 2 GPU-hours, more than 1"},
		{"gpu-hours unknown holds", Conditions{GPUHoursOver: 100}, base, "its GPU-hours cannot be estimated"},
		{"config glob", Conditions{ConfigGlob: "flux-*"}, base, `config "flux-lora" matches "flux-*"`},
		{"config glob no match", Conditions{ConfigGlob: "sdxl-*"}, base, ""},
		{"first job", Conditions{FirstJob: true}, with(func(f *Facts) { f.SubmittedEver = 0 }), "the first job of person:p_a"},
		{"not the first job", Conditions{FirstJob: true}, base, ""},
		{"team", Conditions{Team: "nlp"}, base, "a job of team nlp"},
		{"other team", Conditions{Team: "vision"}, base, ""},
		{"default team", Conditions{Team: "default"}, with(func(f *Facts) { f.Team = "" }), "a job of team default"},
		{"jobs per day over", Conditions{JobsPerDayOver: 2}, base, "job 3 of person:p_a today, more than 2 a day"},
		{"jobs per day at the limit", Conditions{JobsPerDayOver: 3}, base, ""},
		{"every condition must match", Conditions{GPUsOver: 1, Team: "vision"}, base, ""},
		{"both named", Conditions{GPUsOver: 1, Team: "nlp"}, base, "asks for 2 GPUs, more than 1; a job of team nlp"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r, why := Match([]Rule{{Name: "r", Conditions: c.cond}}, c.f)
			if c.want == "" {
				if r != nil {
					t.Fatalf("held by %s: %s", r.Name, why)
				}
				return
			}
			if r == nil || !strings.HasPrefix(why, c.want) {
				t.Fatalf("got rule %v, reason %q; want %q", r, why, c.want)
			}
		})
	}
}

// Rules are checked in order: the first that matches names itself.
func TestMatchFirstRuleWins(t *testing.T) {
	rules := []Rule{{Name: "team", Conditions: Conditions{Team: "vision"}}, {Name: "big", Conditions: Conditions{GPUsOver: 1}},
		{Name: "any-flux", Conditions: Conditions{ConfigGlob: "*"}}}
	r, _ := Match(rules, Facts{GPUs: 4, ConfigName: "x", Team: "nlp"})
	if r == nil || r.Name != "big" {
		t.Fatalf("got %+v, want big", r)
	}
	if r, _ := Match(nil, Facts{GPUs: 64}); r != nil {
		t.Fatal("no rules held a job")
	}
	if !Counted([]Rule{{Conditions: Conditions{GPUsOver: 1}}, {Conditions: Conditions{FirstJob: true}}}) ||
		Counted([]Rule{{Conditions: Conditions{GPUsOver: 1}}}) {
		t.Fatal("Counted")
	}
}

func TestCheckNamesTheField(t *testing.T) {
	cases := []struct {
		rule Rule
		want string
	}{
		{Rule{Name: "ok", Conditions: Conditions{GPUsOver: 1}}, ""},
		{Rule{Name: "", Conditions: Conditions{GPUsOver: 1}}, "name: "},
		{Rule{Name: "-x", Conditions: Conditions{GPUsOver: 1}}, "name: "},
		{Rule{Name: "x", Approver: "boss", Conditions: Conditions{GPUsOver: 1}}, `approver: want "lead" or "admin", got "boss"`},
		{Rule{Name: "x"}, "set at least one condition"},
		{Rule{Name: "x", Conditions: Conditions{SecondsPerStep: 2}}, "set at least one condition"},
		{Rule{Name: "x", Conditions: Conditions{GPUsOver: -1}}, "gpus_over: must not be negative"},
		{Rule{Name: "x", Conditions: Conditions{GPUHoursOver: -1}}, "gpu_hours_over: "},
		{Rule{Name: "x", Conditions: Conditions{GPUsOver: 1, SecondsPerStep: 2}}, "seconds_per_step: only means something with gpu_hours_over"},
		{Rule{Name: "x", Conditions: Conditions{JobsPerDayOver: -3}}, "jobs_per_day_over: "},
		{Rule{Name: "x", Conditions: Conditions{ConfigGlob: "[a-"}}, "config_glob: "},
		{Rule{Name: "x", Conditions: Conditions{Team: "ghost"}}, `team: "ghost" is not a [[teams]] name`},
		{Rule{Name: "x", Conditions: Conditions{Team: "nlp"}}, ""},
		{Rule{Name: "x", Conditions: Conditions{Team: "default"}}, ""},
	}
	for _, c := range cases {
		err := c.rule.Check([]string{"nlp"})
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%+v: %v", c.rule, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%+v: got %v, want %q", c.rule, err, c.want)
		}
	}
}

func TestConditionsRoundTrip(t *testing.T) {
	c := Conditions{GPUsOver: 2, WholeWorker: true, GPUHoursOver: 10, SecondsPerStep: 1.5, ConfigGlob: "a*", FirstJob: true, Team: "nlp", JobsPerDayOver: 5}
	got, err := Decode(c.Encode())
	if err != nil || got != c {
		t.Fatalf("got %+v %v", got, err)
	}
	if _, err := Decode(json.RawMessage(`{"gpus_over":"two"}`)); err == nil {
		t.Fatal("bad conditions decoded")
	}
}

func TestMaxTrainSteps(t *testing.T) {
	for raw, want := range map[string]int64{`{"max_train_steps":10}`: 10, `{"--max_train_steps":"20"}`: 20, `{}`: 0, `{"max_train_steps":-1}`: 0, `[1]`: 0} {
		if got, _ := MaxTrainSteps(json.RawMessage(raw)); got != want {
			t.Errorf("%s: %d, want %d", raw, got, want)
		}
	}
}
