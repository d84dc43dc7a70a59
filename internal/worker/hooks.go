package worker

import (
	"context"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/isolation"
)

// An attempt's steps beside the trainer itself (its log, its checkpoints,
// its GPUs' hygiene and accounting, its reports) are hooks of its runner,
// in the manner of Nomad's alloc runner: each step is a type of its own in a
// hook_*.go file that keeps its own state and implements the phases it
// takes part in. The runner calls the hooks of a phase in the order
// newHooks fixes; the order carries the attempt's guarantees, so it is
// written down once, there.

// prerunHook runs on the loop once the attempt was taken, before its launch.
// A hook that answers wait holds the launch back until it posts its result
// to the loop (a retry's checkpoint coming back).
type prerunHook interface {
	prerun(ctx context.Context) (wait bool)
}

// prestartHook runs inside the launch, once the job's directory is the
// job's and before the trainer starts; it returns what the trainer's
// environment adds. launchStep names it in the launch's timing.
type prestartHook interface {
	prestart(job *isolation.Job, files jobFiles) (env []string)
	launchStep() string
}

// poststartHook runs on the loop right after the trainer started.
type poststartHook interface {
	poststart(ctx context.Context)
}

// stopHook runs when the loop stops an attempt whose trainer has not
// started.
type stopHook interface {
	stop()
}

// closeHook runs on the loop once the trainer's process tree is gone (or it
// never started), before the outcome is written down.
type closeHook interface {
	close()
}

// postrunHook runs off the loop after the attempt ended and before its
// terminal report is sent: the report waits for each in turn.
type postrunHook interface {
	postrun(ctx context.Context, end *attemptEnd)
}

// shutdownHook is postrunHook for an attempt stopped because workerd is
// stopping; workerd waits for it, so each is bounded.
type shutdownHook interface {
	shutdown(end *attemptEnd)
}

// attemptEnd is how an attempt ended, for the hooks that run after it.
type attemptEnd struct {
	rec     statusRecord
	report  bool // the outcome is reported (the orchestrator did not move on)
	spooled bool // the report is in the spool (else one direct try is left)
	// drain bounds the postrun hooks' waits for what is still on its way
	// (the starting report, the log's tail): one budget for all of them.
	drain <-chan time.Time
}

// hooks are a runner's hooks by phase, in the order they run.
type hooks struct {
	prerun    []prerunHook
	prestart  []prestartHook
	poststart []poststartHook
	stop      []stopHook
	close     []closeHook
	postrun   []postrunHook
	shutdown  []shutdownHook
}

// newHooks makes r's steps and fixes the order of each phase.
func newHooks(r *runner) {
	r.logs = &logHook{a: r}
	r.ckpt = &checkpointHook{a: r}
	r.gpus = &gpuHook{a: r}
	r.report = &reportHook{a: r, progressDone: make(chan struct{})}
	r.hooks = hooks{
		prerun: []prerunHook{r.ckpt},
		// The log opens first: what the checkpoints say goes into it.
		prestart:  []prestartHook{r.logs, r.ckpt},
		poststart: []poststartHook{r.ckpt, r.logs},
		stop:      []stopHook{r.ckpt},
		close:     []closeHook{r.logs},
		// The starting report and the log's tail get one drain budget
		// between them; the GPUs are held back and the last checkpoint is
		// uploaded before the report frees the attempt at the orchestrator.
		postrun: []postrunHook{r.report, r.logs, r.gpus, r.ckpt},
		// At shutdown the last checkpoint goes first (the retry resumes from
		// it); the report leaves the spool's hold to the final flush.
		shutdown: []shutdownHook{r.ckpt, r.report, r.logs},
	}
}
