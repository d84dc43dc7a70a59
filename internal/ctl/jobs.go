package ctl

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/simpletuner/simpletuner-orchestration/internal/api"
	"github.com/simpletuner/simpletuner-orchestration/internal/ctl/client"
	"github.com/simpletuner/simpletuner-orchestration/internal/ctl/output"
	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
)

func (a *app) jobCommands() []*cobra.Command {
	return []*cobra.Command{a.submitCommand(), a.jobsCommand(), a.jobCommand(), a.logsCommand(), a.cancelCommand(),
		a.artifactsCommand(), a.downloadCommand()}
}

func (a *app) submitCommand() *cobra.Command {
	var (
		configFile, target string
		priority, gpus     int
		maxRetries         int
		minVRAM            float64
		timeout            time.Duration
		labels             []string
		wait, quiet        bool
		noCheckpoints      bool
		pollEvery          time.Duration
		dataloaderFile     string
		hfTokenFile        string
		afterJobs          []string
		onUnmet            string
	)
	cmd := &cobra.Command{
		Use:   "submit [CONFIG_NAME | --config FILE | -]",
		Short: "Queue a training job",
		Long: `Queue a training job: a config by name (from the orchestrator's configs directory),
a JSON config file (--config FILE), or a JSON config on standard input (-).

With --after JOB, the job waits (status waiting) until JOB ends and joins
the queue if it ended as asked: JOB or JOB:ok when it completed, JOB:failed
when it failed, JOB:any however it ended. When it can never be, the job is
cancelled, or with --on-unmet hold kept waiting until you cancel it.

With --wait, simpletunerctl waits until the job ends and exits 0 when it
completed, 1 when it failed or was cancelled.`,
		Example: `  simpletunerctl submit my-lora --label gpu_type='a100*' --gpus 2 --wait
  simpletunerctl submit --config run.json --priority 30
  simpletunerctl submit evaluate --after j_3kq9x2m4a7bd --after j_8fw2n5c1p0te:any
  jq '.steps = 100' run.json | simpletunerctl submit -`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var body api.Submit
			fromStdin := len(args) == 1 && args[0] == "-"
			switch {
			case fromStdin && configFile != "":
				return usagef("give --config FILE or -, not both")
			case len(args) == 1 && configFile != "":
				return usagef("give CONFIG_NAME or --config FILE, not both")
			case len(args) == 0 && configFile == "":
				return usagef("give one of CONFIG_NAME, --config FILE or - (config on standard input)")
			case len(args) == 1 && !fromStdin:
				body.ConfigName = &args[0]
			default:
				cfg, err := readJSONObject(configFile, a.env.Stdin, "--config")
				if err != nil {
					return err
				}
				body.Config = cfg
			}
			if dataloaderFile != "" {
				dl, err := readJSONValue(dataloaderFile, "--dataloader")
				if err != nil {
					return err
				}
				body.Dataloader = dl
			}
			if hfTokenFile != "" {
				b, err := os.ReadFile(hfTokenFile)
				if err != nil {
					return fmt.Errorf("--hf-token-file: %w", err)
				}
				body.HFToken = strings.TrimSpace(string(b))
			}
			f := cmd.Flags()
			body.Target = protocol.Target(target)
			if f.Changed("priority") {
				body.Priority = &priority
			}
			if f.Changed("gpus") {
				body.GPUCount = &gpus
			}
			if f.Changed("min-vram") {
				body.MinVRAMGB = &minVRAM
			}
			if f.Changed("max-retries") {
				body.MaxRetries = &maxRetries
			}
			if f.Changed("job-timeout") {
				if timeout < time.Second {
					return usagef("--job-timeout must be at least 1s")
				}
				secs := int(timeout / time.Second)
				body.TimeoutSeconds = &secs
			}
			if noCheckpoints {
				off := false
				body.Checkpoints = &off
			}
			if len(labels) > 0 {
				m, err := parseLabels("--label", labels)
				if err != nil {
					return err
				}
				body.WorkerLabels = m
			}
			deps, err := parseAfter(afterJobs)
			if err != nil {
				return err
			}
			body.DependsOn, body.OnUnmet = deps, onUnmet
			return a.submit(cmd.Context(), body, wait, quiet, pollEvery)
		},
	}
	f := cmd.Flags()
	f.StringVar(&configFile, "config", "", "JSON file holding the training config (\"-\" for standard input)")
	f.StringVar(&target, "target", "", "which workers may run it: worker, local or auto (default auto)")
	f.IntVar(&priority, "priority", 10, "0 to 50; higher runs first; above 10 only as far as an admin granted (whoami shows the limit)")
	f.StringArrayVar(&labels, "label", nil, "worker label requirement key=glob (repeatable)")
	f.IntVar(&gpus, "gpus", 0, "GPUs the job gets (0: CPU only; default: the config's --num_processes, else the whole worker)")
	f.Float64Var(&minVRAM, "min-vram", 0, "GB of GPU memory the worker must have")
	f.IntVar(&maxRetries, "max-retries", 0, "retries a lost worker may cost the job (default: the orchestrator's max_retries)")
	f.DurationVar(&timeout, "job-timeout", 0, "stop the job after this long, e.g. 6h (default: no limit)")
	f.StringVar(&dataloaderFile, "dataloader", "", "JSON file with the dataloader config")
	f.StringVar(&hfTokenFile, "hf-token-file", "", "file holding a Hugging Face token for the job")
	f.BoolVar(&noCheckpoints, "no-checkpoints", false, "keep none of the job's checkpoints in its artifacts: a retry starts afresh")
	f.StringArrayVar(&afterJobs, "after", nil, "wait for this job to end first: JOB[:ok|any|failed] (repeatable; ok by default)")
	f.StringVar(&onUnmet, "on-unmet", "", "when an --after job ends otherwise: cancel (the default) or hold (keep waiting)")
	f.BoolVar(&wait, "wait", false, "wait for the job to end; exit 0 if it completed, 1 otherwise")
	f.BoolVarP(&quiet, "quiet", "q", false, "print only the job id")
	f.DurationVar(&pollEvery, "poll", time.Second, "with --wait, how often to ask for the job's state")
	_ = f.MarkHidden("poll")
	_ = cmd.RegisterFlagCompletionFunc("target", cobra.FixedCompletions([]string{"worker", "local", "auto"}, cobra.ShellCompDirectiveNoFileComp))
	_ = cmd.RegisterFlagCompletionFunc("on-unmet", cobra.FixedCompletions([]string{"cancel", "hold"}, cobra.ShellCompDirectiveNoFileComp))
	return cmd
}

// parseAfter reads --after values: JOB, or JOB:ok, JOB:any, JOB:failed.
// The orchestrator checks the condition; only the shape is checked here.
func parseAfter(values []string) ([]api.Dependency, error) {
	var out []api.Dependency
	for _, v := range values {
		id, when, _ := strings.Cut(v, ":")
		if id == "" {
			return nil, usagef("--after %q: give a job id, optionally followed by :ok, :any or :failed", v)
		}
		out = append(out, api.Dependency{JobID: id, When: when})
	}
	return out, nil
}

// readJSONObject reads a JSON object from path ("-" or "" with stdin given: standard input).
func readJSONObject(path string, stdin io.Reader, flag string) (json.RawMessage, error) {
	raw, err := readJSON(path, stdin, flag)
	if err != nil {
		return nil, err
	}
	if !bytes.HasPrefix(bytes.TrimSpace(raw), []byte("{")) {
		return nil, usagef("%s %s: the training config must be a JSON object", flag, nameOf(path))
	}
	return raw, nil
}

func readJSONValue(path, flag string) (json.RawMessage, error) {
	return readJSON(path, nil, flag)
}

func nameOf(path string) string {
	if path == "" || path == "-" {
		return "(standard input)"
	}
	return path
}

func readJSON(path string, stdin io.Reader, flag string) (json.RawMessage, error) {
	var (
		data []byte
		err  error
	)
	if path == "" || path == "-" {
		if stdin == nil {
			return nil, usagef("%s: a file name is required", flag)
		}
		data, err = io.ReadAll(io.LimitReader(stdin, 64<<20))
	} else {
		data, err = os.ReadFile(path)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", flag, err)
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, usagef("%s %s is empty", flag, nameOf(path))
	}
	var v any
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&v); err != nil {
		return nil, usagef("%s %s is not valid JSON: %s", flag, nameOf(path), jsonErrorAt(data, err))
	}
	if len(bytes.TrimSpace(data[dec.InputOffset():])) > 0 {
		return nil, usagef("%s %s holds more than one JSON value", flag, nameOf(path))
	}
	return json.RawMessage(bytes.TrimSpace(data)), nil
}

// jsonErrorAt names the line of a syntax error.
func jsonErrorAt(data []byte, err error) string {
	var se *json.SyntaxError
	if errors.As(err, &se) {
		line := 1 + bytes.Count(data[:min(int(se.Offset), len(data))], []byte("\n"))
		return fmt.Sprintf("line %d: %v", line, err)
	}
	if errors.Is(err, io.ErrUnexpectedEOF) {
		line := 1 + bytes.Count(bytes.TrimRight(data, " \t\r\n"), []byte("\n"))
		return fmt.Sprintf("line %d: the JSON ends before it is complete", line)
	}
	return err.Error()
}

func (a *app) submit(ctx context.Context, body api.Submit, wait, quiet bool, pollEvery time.Duration) error {
	cl, err := a.client()
	if err != nil {
		return err
	}
	var reply api.Submitted
	raw, err := cl.JSON(ctx, client.Request{Method: http.MethodPost, Path: "/api/queue/submit", Body: body}, &reply)
	if err != nil {
		return err
	}
	// On stderr, whatever the format: the job was queued all the same.
	for _, w := range append([]string{reply.Warning}, reply.Warnings...) {
		if w != "" {
			a.note("simpletunerctl submit: warning: %s", w)
		}
	}
	switch {
	case a.format == output.JSONFormat && !wait:
		return output.WriteJSON(a.out(), raw)
	case quiet:
		fmt.Fprintln(a.out(), reply.JobID)
	case a.format != output.JSONFormat:
		pos := fmt.Sprintf(", %d ahead of it", reply.QueuePosition)
		gets := ""
		if reply.GPUAllocation != "" {
			gets = "; it gets " + reply.GPUAllocation
		}
		switch {
		case reply.Approval != nil:
			pos = fmt.Sprintf(", request %d: rule %s, %s", reply.Approval.RequestID, reply.Approval.Rule, reply.Approval.Reason)
		case reply.Status == string(protocol.JobWaiting):
			ids := make([]string, len(body.DependsOn))
			for i, d := range body.DependsOn {
				ids[i] = d.JobID
			}
			pos = " for " + strings.Join(ids, ", ")
		}
		fmt.Fprintf(a.out(), "submitted job %s (%s%s%s)\n", reply.JobID, reply.Status, pos, gets)
	}
	if !wait {
		return nil
	}
	job, jobRaw, err := a.waitJob(ctx, reply.JobID, pollEvery)
	if err != nil {
		return err
	}
	switch {
	case a.format == output.JSONFormat:
		if err := output.WriteJSON(a.out(), jobRaw); err != nil {
			return err
		}
	case !quiet:
		line := fmt.Sprintf("job %s %s", job.JobID, a.style.State(job.Status))
		if e := deref(job.Error); e != "" && job.Status != "completed" {
			line += ": " + e
		}
		fmt.Fprintln(a.out(), line)
	}
	if job.Status != "completed" {
		return &silentError{ExitFailed}
	}
	return nil
}

// waitJob polls the job until it is terminal. Connection failures and 503
// (an orchestrator restarting, a database failing over) are waited out.
func (a *app) waitJob(ctx context.Context, id string, every time.Duration) (Job, []byte, error) {
	cl, err := a.client()
	if err != nil {
		return Job{}, nil, err
	}
	if every <= 0 {
		every = time.Second
	}
	warned := false
	for {
		var j Job
		raw, err := cl.GetJSON(ctx, "/api/queue/"+client.PathEscape(id), nil, &j)
		switch {
		case err == nil:
			if warned {
				a.note("%s: reconnected", a.endpointName())
				warned = false
			}
			if j.Terminal() {
				return j, raw, nil
			}
		case transient(err):
			if !warned {
				a.note("waiting for job %s: %v; retrying", id, err)
				warned = true
			}
		default:
			return Job{}, nil, err
		}
		select {
		case <-ctx.Done():
			return Job{}, nil, ctx.Err()
		case <-time.After(every):
		}
	}
}

func (a *app) endpointName() string {
	if a.cl != nil {
		return a.cl.Endpoint()
	}
	return "orchestrator"
}

// transient reports failures worth retrying: no connection, or the API saying
// it is briefly unavailable.
func transient(err error) bool {
	var ce *client.ConnError
	return errors.As(err, &ce) || client.IsStatus(err, http.StatusServiceUnavailable, http.StatusBadGateway, http.StatusGatewayTimeout)
}

// jobStatusFilters are the statuses GET /api/queue filters on: each job
// status, pending (queued) and active (not finished).
var jobStatusFilters = []string{"queued", "dispatched", "running", "canceling", "completed", "failed", "cancelled", "pending", "active"}

func (a *app) jobsCommand() *cobra.Command {
	var (
		status, worker string
		limit          int
		watch          bool
		interval       time.Duration
	)
	cmd := &cobra.Command{
		Use:   "jobs",
		Short: "List jobs, newest first",
		Example: `  simpletunerctl jobs
  simpletunerctl jobs --status running -w
  simpletunerctl jobs --worker gpu-1 -o wide`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if limit < 1 {
				return usagef("--limit must be at least 1")
			}
			status, err := statusFlag(status, jobStatusFilters)
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			q := url.Values{}
			if status != "" {
				q.Set("status", status)
			}
			if a.format != output.TableFormat {
				q.Set("waiting", "1") // why each queued job waits: the NOTE column, and in JSON
			}
			var keep func(Job) bool
			if worker != "" {
				wk, err := a.resolveWorker(ctx, worker)
				if err != nil {
					return err
				}
				keep = func(j Job) bool { return deref(j.WorkerID) == wk.WorkerID }
				// Filtered by the orchestrator where it can (older ones ignore
				// the parameter; keep filters in any case).
				q.Set("worker_id", wk.WorkerID)
			}
			render := func(w io.Writer) error {
				jobs, raws, head, err := a.newestJobs(ctx, q, limit, keep)
				if err != nil {
					return err
				}
				if a.format == output.JSONFormat {
					if raws == nil {
						raws = []json.RawMessage{}
					}
					// The API's shape, newest first.
					// A worker filter has no total on this orchestrator.
					reply := struct {
						Entries      []json.RawMessage `json:"entries"`
						Total        json.RawMessage   `json:"total,omitempty"`
						TotalPending json.RawMessage   `json:"total_pending,omitempty"`
						TotalRunning json.RawMessage   `json:"total_running,omitempty"`
					}{raws, head.raw["total"], head.raw["total_pending"], head.raw["total_running"]}
					return output.MarshalJSON(w, reply)
				}
				if len(jobs) == 0 {
					_, err := fmt.Fprintln(w, "no jobs")
					return err
				}
				return a.renderer().jobs(w, jobs)
			}
			if watch {
				return a.watch(ctx, interval, render)
			}
			return render(a.out())
		},
	}
	f := cmd.Flags()
	f.StringVar(&status, "status", "", "only jobs in this state: queued, running, completed, failed, cancelled, … (pending, active)")
	f.StringVar(&worker, "worker", "", "only jobs on this worker (id, name or id prefix)")
	f.IntVar(&limit, "limit", 30, "show at most this many jobs")
	f.BoolVarP(&watch, "watch", "w", false, "redraw every --interval until interrupted")
	f.DurationVar(&interval, "interval", 2*time.Second, "how often --watch redraws")
	_ = cmd.RegisterFlagCompletionFunc("status", cobra.FixedCompletions(jobStatusFilters, cobra.ShellCompDirectiveNoFileComp))
	_ = cmd.RegisterFlagCompletionFunc("worker", a.completeWorkers)
	return cmd
}

// watch redraws render every interval until ctx ends (Ctrl-C ends it with
// status 0). On a terminal it clears the screen; into a pipe it separates
// frames with a blank line.
func (a *app) watch(ctx context.Context, interval time.Duration, render func(io.Writer) error) error {
	if interval < 100*time.Millisecond {
		return usagef("--interval must be at least 100ms")
	}
	for frame := 0; ; frame++ {
		var buf bytes.Buffer
		err := render(&buf)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if !transient(err) {
				return err
			}
			buf.Reset()
			fmt.Fprintf(&buf, "%s: %v\n", a.env.Now().UTC().Format(time.TimeOnly), err)
		}
		switch {
		case a.env.StdoutTTY:
			fmt.Fprint(a.out(), "\x1b[H\x1b[2J")
		case frame > 0:
			fmt.Fprintln(a.out())
		}
		if _, err := a.out().Write(buf.Bytes()); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(interval):
		}
	}
}

func (a *app) renderer() renderer {
	return renderer{now: a.env.Now(), style: a.style, wide: a.format == output.WideFormat}
}

func (a *app) jobCommand() *cobra.Command {
	return &cobra.Command{
		Use:               "job ID",
		Short:             "Show a job with its attempts",
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: a.completeJobs,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			id, err := a.resolveJob(ctx, args[0])
			if err != nil {
				return err
			}
			cl, err := a.client()
			if err != nil {
				return err
			}
			var j Job
			raw, err := cl.GetJSON(ctx, "/api/queue/"+client.PathEscape(id), nil, &j)
			if err != nil {
				return err
			}
			if a.format == output.JSONFormat {
				return output.WriteJSON(a.out(), raw)
			}
			return a.renderer().job(a.out(), j)
		},
	}
}

func (a *app) cancelCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "cancel ID...",
		Short: "Cancel jobs",
		Long: `Cancel jobs. A queued job is cancelled at once; a running one moves to
canceling until its worker confirms. With several ids, every one is tried; the
exit status is that of the first failure.`,
		Args:              cobra.MinimumNArgs(1),
		ValidArgsFunction: a.completeJobs,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			cl, err := a.client()
			if err != nil {
				return err
			}
			var (
				replies []json.RawMessage
				code    int
			)
			for _, arg := range args {
				raw, status, err := a.cancelOne(ctx, cl, arg)
				if err != nil {
					fmt.Fprintf(a.env.Stderr, "%s: %s: %s\n", cmd.CommandPath(), arg, oneLine(err.Error()))
					if code == 0 {
						code = exitCode(err)
					}
					continue
				}
				replies = append(replies, raw)
				if a.format != output.JSONFormat {
					fmt.Fprintf(a.out(), "%s\n", status)
				}
			}
			if a.format == output.JSONFormat {
				if replies == nil {
					replies = []json.RawMessage{}
				}
				if err := output.MarshalJSON(a.out(), replies); err != nil {
					return err
				}
			}
			if code != 0 {
				return &silentError{code}
			}
			return nil
		},
	}
}

func (a *app) cancelOne(ctx context.Context, cl *client.Client, arg string) (json.RawMessage, string, error) {
	id, err := a.resolveJob(ctx, arg)
	if err != nil {
		return nil, "", err
	}
	var reply api.JobAction
	raw, err := cl.JSON(ctx, client.Request{Method: http.MethodPost, Path: "/api/queue/" + client.PathEscape(id) + "/cancel"}, &reply)
	if err != nil {
		return nil, "", err
	}
	return raw, fmt.Sprintf("job %s %s", reply.JobID, a.style.State(reply.Status)), nil
}
