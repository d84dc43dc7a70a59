package worker

import (
	"fmt"
	"log/slog"
	"slices"
	"testing"

	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
)

// hookNames names each hook of a phase by its step.
func hookNames[H any](r *runner, hs []H) []string {
	names := map[any]string{r.logs: "log", r.ckpt: "checkpoints", r.gpus: "gpus", r.report: "report"}
	var out []string
	for _, h := range hs {
		out = append(out, names[any(h)])
	}
	return out
}

// The order of each phase carries the attempt's guarantees: the job's log
// is open before the checkpoints write into it; after the attempt, the
// starting report and the log go first (one drain budget), the GPUs are
// checked and the last checkpoint uploaded before the terminal report frees
// the attempt; at shutdown the last checkpoint goes first.
func TestRunnerHookOrder(t *testing.T) {
	t.Parallel()
	env := &runnerEnv{log: slog.New(slog.DiscardHandler)}
	r := newRunner(env, &protocol.JobSubmitEvent{JobID: "j_hooks", Attempt: 1}, JobSettings{})
	for _, tc := range []struct {
		phase     string
		got, want []string
	}{
		{"prerun", hookNames(r, r.hooks.prerun), []string{"checkpoints"}},
		{"prestart", hookNames(r, r.hooks.prestart), []string{"log", "checkpoints"}},
		{"poststart", hookNames(r, r.hooks.poststart), []string{"checkpoints", "log"}},
		{"stop", hookNames(r, r.hooks.stop), []string{"checkpoints"}},
		{"close", hookNames(r, r.hooks.close), []string{"log"}},
		{"postrun", hookNames(r, r.hooks.postrun), []string{"report", "log", "gpus", "checkpoints"}},
		{"shutdown", hookNames(r, r.hooks.shutdown), []string{"checkpoints", "report", "log"}},
	} {
		if !slices.Equal(tc.got, tc.want) {
			t.Errorf("%s hooks %v, want %v", tc.phase, tc.got, tc.want)
		}
	}
	var steps []string
	for _, h := range r.hooks.prestart {
		steps = append(steps, h.launchStep())
	}
	// The launch timing names its steps so; the launch benchmark compares them across builds.
	if fmt.Sprint(steps) != "[spool checkpoints]" {
		t.Errorf("launch steps %v", steps)
	}
}
