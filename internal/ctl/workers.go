package ctl

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/simpletuner/simpletuner-orchestration/internal/api"
	"github.com/simpletuner/simpletuner-orchestration/internal/ctl/client"
	"github.com/simpletuner/simpletuner-orchestration/internal/ctl/output"
	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
)

func (a *app) workerCommands() []*cobra.Command {
	return []*cobra.Command{a.workersCommand(), group("worker", "Create, inspect and manage one worker",
		a.workerCreateCommand(), a.workerShowCommand(), a.workerDrainCommand(), a.workerResumeCommand(),
		a.workerRotateCommand(), a.workerDeleteCommand(), a.workerLabelsCommand(), a.workerClearGPUCommand())}
}

func (a *app) workerClearGPUCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "clear-gpu ID INDEX",
		Short: "Lift the fence of a GPU the worker found unhealthy",
		Long: `Lift the fence of a GPU the worker fenced after a hardware fault (an XID
that blames the hardware, uncorrectable ECC errors, a row-remapping failure,
a GPU lost from the bus), once the GPU was serviced or the fault judged a
fluke. The worker is told at once and takes jobs on the GPU again. A GPU held
back for a leftover process is released by the worker itself once clean.`,
		Args:              cobra.ExactArgs(2),
		ValidArgsFunction: a.completeWorkers,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			index, err := strconv.Atoi(args[1])
			if err != nil || index < 0 {
				return usagef("INDEX must be a GPU's index, a whole number from 0; got %q", args[1])
			}
			wk, err := a.resolveWorker(ctx, args[0])
			if err != nil {
				return err
			}
			cl, err := a.client()
			if err != nil {
				return err
			}
			raw, err := cl.JSON(ctx, client.Request{Method: http.MethodPost,
				Path: "/api/admin/workers/" + client.PathEscape(wk.WorkerID) + "/gpus/" + strconv.Itoa(index) + "/clear"}, nil)
			if err != nil {
				return err
			}
			if a.format == output.JSONFormat {
				return output.WriteJSON(a.out(), raw)
			}
			_, err = fmt.Fprintf(a.out(), "worker %s (%s): GPU %d cleared; the worker takes it back into use\n", wk.WorkerID, workerText(wk.Name), index)
			return err
		},
	}
}

func (a *app) workersCommand() *cobra.Command {
	var (
		status   string
		watch    bool
		interval time.Duration
	)
	cmd := &cobra.Command{
		Use:   "workers",
		Short: "List workers: status, GPUs free/total, current job, last heartbeat",
		Long: `List workers with their status, GPUs free/total, current job and the age of
their last heartbeat. A status ending in "?" means the store still has the
worker up but no orchestrator holds its event stream.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			status, err := statusFlag(status, workerStatusFilters)
			if err != nil {
				return err
			}
			render := func(w io.Writer) error {
				ws, raws, err := a.allWorkers(ctx, status)
				if err != nil {
					return err
				}
				if a.format == output.JSONFormat {
					if raws == nil {
						raws = []json.RawMessage{}
					}
					// The API's shape, with every page in one list.
					return output.MarshalJSON(w, struct {
						Workers []json.RawMessage `json:"workers"`
						Total   int               `json:"total"`
					}{raws, len(raws)})
				}
				if len(ws) == 0 {
					_, err := fmt.Fprintln(w, "no workers")
					return err
				}
				sort.SliceStable(ws, func(i, j int) bool { return ws[i].Name < ws[j].Name })
				return a.renderer().workers(w, ws)
			}
			if watch {
				return a.watch(ctx, interval, render)
			}
			return render(a.out())
		},
	}
	f := cmd.Flags()
	f.StringVar(&status, "status", "", "only workers in this state: connecting, idle, partial, busy, draining, offline")
	f.BoolVarP(&watch, "watch", "w", false, "redraw every --interval until interrupted")
	f.DurationVar(&interval, "interval", 2*time.Second, "how often --watch redraws")
	_ = cmd.RegisterFlagCompletionFunc("status", cobra.FixedCompletions(workerStatusFilters, cobra.ShellCompDirectiveNoFileComp))
	return cmd
}

// workerStatusFilters are the statuses GET /api/admin/workers filters on.
var workerStatusFilters = []string{"connecting", "idle", "partial", "busy", "draining", "offline"}

// statusFlag checks a --status value against the ones the list filters on,
// case aside; "" is no filter. Another value is bad usage, refused before
// anything is asked.
func statusFlag(value string, known []string) (string, error) {
	value = strings.ToLower(value)
	if value != "" && !slices.Contains(known, value) {
		return "", usagef("--status must be one of %s; got %q", strings.Join(known, ", "), value)
	}
	return value, nil
}

func (a *app) workerShowCommand() *cobra.Command {
	return &cobra.Command{
		Use:               "show ID",
		Short:             "Show one worker",
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: a.completeWorkers,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			wk, err := a.resolveWorker(ctx, args[0])
			if err != nil {
				return err
			}
			cl, err := a.client()
			if err != nil {
				return err
			}
			raw, err := cl.GetJSON(ctx, "/api/admin/workers/"+client.PathEscape(wk.WorkerID), nil, &wk)
			if err != nil {
				return err
			}
			if a.format == output.JSONFormat {
				return output.WriteJSON(a.out(), raw)
			}
			return a.renderer().worker(a.out(), wk)
		},
	}
}

func (a *app) workerCreateCommand() *cobra.Command {
	var (
		persistent, ephemeral, force bool
		unlocked                     bool
		labels                       []string
		credential                   string
	)
	cmd := &cobra.Command{
		Use:   "create NAME",
		Short: "Create a worker and print its token (once)",
		Long: `Create a worker. Its token is shown only in this reply; with --credential FILE
it is written to FILE (mode 0600) instead, ready for the workerd unit's
LoadCredential=. Without --persistent or --ephemeral the orchestrator's
default (persistent) applies.

The worker is created locked: jobs are placed on it by the labels given here
(or later with "worker labels"), never by labels the worker reports, and its
GPU inventory is the first one it reports (a later, larger one is ignored and
audited). So a stolen worker token cannot advertise its way into other jobs.
--unlocked trusts what the worker reports instead.`,
		Example: `  simpletunerctl worker create gpu-1 --persistent --label gpu_type=a100 \
      --credential /etc/simpletuner/worker-token`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if persistent && ephemeral {
				return usagef("give --persistent or --ephemeral, not both")
			}
			body := api.CreateWorker{Name: &args[0]}
			if unlocked {
				body.LabelsLocked = new(false)
			}
			if persistent {
				body.WorkerType = protocol.Persistent
			}
			if ephemeral {
				body.WorkerType = protocol.Ephemeral
			}
			if len(labels) > 0 {
				m, err := parseLabels("--label", labels)
				if err != nil {
					return err
				}
				body.Labels = m
			}
			return a.issueWorkerToken(cmd.Context(), client.Request{Method: http.MethodPost, Path: "/api/admin/workers", Body: body},
				credential, force, func(r api.WorkerCreated) string {
					return fmt.Sprintf("created worker %s (%s, %s, %s)", r.WorkerID, r.Name, r.WorkerType, lockWord(r.LabelsLocked))
				})
		},
	}
	f := cmd.Flags()
	f.BoolVar(&persistent, "persistent", false, "the worker stays registered between jobs and while offline")
	f.BoolVar(&ephemeral, "ephemeral", false, "the worker exits after one job and is removed once long offline")
	f.StringArrayVar(&labels, "label", nil, "label key=value (repeatable)")
	f.BoolVar(&unlocked, "unlocked", false, "place jobs by the labels and GPU inventory the worker reports (default: locked to the admin's labels and the first inventory)")
	f.StringVar(&credential, "credential", "", "write the token to this file (mode 0600) instead of printing it")
	f.BoolVar(&force, "force", false, "with --credential, replace an existing file")
	return cmd
}

func (a *app) workerRotateCommand() *cobra.Command {
	var (
		credential string
		force      bool
	)
	cmd := &cobra.Command{
		Use:   "rotate ID",
		Short: "Issue a new token for a worker (the old one stops working at once)",
		Long: `Issue a new token for a worker. The old token, and the event stream it opened,
stop working at once. The new token is shown only in this reply; with
--credential FILE it is written to FILE (mode 0600) instead.`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: a.completeWorkers,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			wk, err := a.resolveWorker(ctx, args[0])
			if err != nil {
				return err
			}
			return a.issueWorkerToken(ctx, client.Request{Method: http.MethodPost, Path: "/api/admin/workers/" + client.PathEscape(wk.WorkerID) + "/token"},
				credential, force, func(r api.WorkerCreated) string {
					return fmt.Sprintf("new token for worker %s (%s); the old one no longer works", wk.WorkerID, wk.Name)
				})
		},
	}
	cmd.Flags().StringVar(&credential, "credential", "", "write the token to this file (mode 0600) instead of printing it")
	cmd.Flags().BoolVar(&force, "force", false, "with --credential, replace an existing file")
	return cmd
}

// issueWorkerToken sends a request whose reply holds a worker token and shows
// it once, or writes it to a credential file. The file is prepared before the
// request, so that a token is never issued into a file that cannot be written.
func (a *app) issueWorkerToken(ctx context.Context, req client.Request, credential string, force bool, headline func(api.WorkerCreated) string) error {
	cl, err := a.client()
	if err != nil {
		return err
	}
	var cred *credentialFile
	if credential != "" {
		if cred, err = prepareCredential(credential, force); err != nil {
			return err
		}
		defer cred.abort()
	}
	var reply api.WorkerCreated // a rotation's reply is its first fields
	raw, err := cl.JSON(ctx, req, &reply)
	if err != nil {
		return err
	}
	if cred != nil {
		if err := cred.commit(reply.Token); err != nil {
			// The token exists now and is shown nowhere else: print it rather than lose it.
			fmt.Fprintf(a.out(), "token (shown only once): %s\n", reply.Token)
			return fmt.Errorf("writing the credential %s: %w", credential, err)
		}
		raw = bytes.ReplaceAll(raw, []byte(reply.Token), []byte("(written to "+credential+")"))
	}
	if a.format == output.JSONFormat {
		return output.WriteJSON(a.out(), raw)
	}
	fmt.Fprintln(a.out(), headline(reply))
	if cred != nil {
		fmt.Fprintf(a.out(), "token written to %s (mode 0600); workerd reads it as its [orchestrator] token_file "+
			"(the packaged default is /etc/simpletuner/worker-token), and a running workerd takes a rotated one without a restart\n", credential)
		return nil
	}
	fmt.Fprintf(a.out(), "token (shown only once): %s\n", reply.Token)
	if reply.ConnectionCommand != "" {
		fmt.Fprintf(a.out(), "connect with: %s\n", reply.ConnectionCommand)
	}
	return nil
}

// credentialFile is a token file being written: a 0600 temporary file in the
// target's directory, renamed over the target when the token is in it.
type credentialFile struct {
	path string
	tmp  *os.File
}

func prepareCredential(path string, force bool) (*credentialFile, error) {
	if _, err := os.Lstat(path); err == nil && !force {
		return nil, fmt.Errorf("--credential %s exists; use --force to replace it", path)
	} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("--credential: %w", err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return nil, fmt.Errorf("--credential: cannot write in %s: %w", filepath.Dir(path), err)
	}
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return nil, fmt.Errorf("--credential: %w", err)
	}
	return &credentialFile{path: path, tmp: tmp}, nil
}

func (c *credentialFile) commit(token string) error {
	if _, err := c.tmp.WriteString(token + "\n"); err != nil {
		return err
	}
	if err := c.tmp.Sync(); err != nil {
		return err
	}
	if err := c.tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(c.tmp.Name(), c.path); err != nil {
		return err
	}
	c.tmp = nil
	return nil
}

// abort removes the temporary file unless commit renamed it.
func (c *credentialFile) abort() {
	if c.tmp != nil {
		c.tmp.Close()
		os.Remove(c.tmp.Name())
	}
}

// workerAction is drain, resume and delete: resolve, POST or DELETE, report.
func (a *app) workerAction(use, short, long string, method func(cmd *cobra.Command) (string, string)) *cobra.Command {
	return &cobra.Command{
		Use:               use + " ID",
		Short:             short,
		Long:              long,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: a.completeWorkers,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			wk, err := a.resolveWorker(ctx, args[0])
			if err != nil {
				return err
			}
			cl, err := a.client()
			if err != nil {
				return err
			}
			m, path := method(cmd)
			var reply api.WorkerAction
			raw, err := cl.JSON(ctx, client.Request{Method: m, Path: "/api/admin/workers/" + client.PathEscape(wk.WorkerID) + path}, &reply)
			if use == "delete" && path == "" && client.IsStatus(err, http.StatusConflict) {
				return fmt.Errorf("%w; --force deletes it anyway", err)
			}
			if err != nil {
				return err
			}
			if a.format == output.JSONFormat {
				return output.WriteJSON(a.out(), raw)
			}
			state := workerStatusText(reply.Status)
			if use == "delete" {
				state = "deleted"
			}
			_, err = fmt.Fprintf(a.out(), "worker %s (%s) %s\n", wk.WorkerID, workerText(wk.Name), a.style.State(state))
			return err
		},
	}
}

func (a *app) workerDrainCommand() *cobra.Command {
	return a.workerAction("drain", "Let a worker finish its job and take no new one",
		"Let a worker finish its current job and take no new one; resume undoes it.",
		func(*cobra.Command) (string, string) { return http.MethodPost, "/drain" })
}

func (a *app) workerResumeCommand() *cobra.Command {
	return a.workerAction("resume", "Let a drained worker take jobs again", "",
		func(*cobra.Command) (string, string) { return http.MethodPost, "/resume" })
}

func (a *app) workerDeleteCommand() *cobra.Command {
	cmd := a.workerAction("delete", "Delete a worker (an offline one, unless --force)",
		`Delete a worker. Only an offline worker can be deleted, unless --force: then its
stream is closed and its job requeued without spending a retry.`,
		func(cmd *cobra.Command) (string, string) {
			if force, _ := cmd.Flags().GetBool("force"); force {
				return http.MethodDelete, "?force=true"
			}
			return http.MethodDelete, ""
		})
	cmd.Flags().Bool("force", false, "delete a connected worker too; its job is requeued")
	return cmd
}

func (a *app) workerLabelsCommand() *cobra.Command {
	var clear, lock, unlock bool
	cmd := &cobra.Command{
		Use:   "labels ID [KEY=VALUE | KEY-]...",
		Short: "Show or change a worker's labels",
		Long: `Without arguments, print the worker's labels. KEY=VALUE adds or replaces a
label, KEY- removes one; labels not named stay (the orchestrator's PATCH is a
JSON merge-patch). --clear removes every label; those the worker reports
itself come back when it registers again (unless the worker is locked).
--unlock lets the worker's own labels and GPU inventory count for placement
from its next registration; --lock pins them to the admin's labels and the
next inventory it reports.`,
		Example:           `  simpletunerctl worker labels gpu-1 team=nlp site=dc-a old-`,
		Args:              cobra.MinimumNArgs(1),
		ValidArgsFunction: a.completeWorkers,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			if clear && len(args) > 1 {
				return usagef("give KEY=VALUE labels or --clear, not both")
			}
			if lock && unlock {
				return usagef("give --lock or --unlock, not both")
			}
			wk, err := a.resolveWorker(ctx, args[0])
			if err != nil {
				return err
			}
			cl, err := a.client()
			if err != nil {
				return err
			}
			raw := []byte(nil)
			if len(args) > 1 || clear || lock || unlock {
				patch, err := labelPatch(args[1:])
				if err != nil {
					return err
				}
				if clear {
					for k := range wk.Labels {
						patch[k] = nil
					}
				}
				body := api.PatchWorker{Labels: patch}
				if lock || unlock {
					body.LabelsLocked = new(lock)
				}
				wk.Labels = nil // decoding into a map merges: start from the reply alone
				raw, err = cl.JSON(ctx, client.Request{Method: http.MethodPatch, Path: "/api/admin/workers/" + client.PathEscape(wk.WorkerID),
					Body: body}, &wk)
				if err != nil {
					return err
				}
			} else if raw, err = cl.GetJSON(ctx, "/api/admin/workers/"+client.PathEscape(wk.WorkerID), nil, &wk); err != nil {
				return err
			}
			if a.format == output.JSONFormat {
				return output.WriteJSON(a.out(), raw)
			}
			keys := make([]string, 0, len(wk.Labels))
			for k := range wk.Labels {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			for _, k := range keys {
				fmt.Fprintf(a.out(), "%s=%s\n", workerText(k), workerText(wk.Labels[k]))
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&clear, "clear", false, "remove every label an admin set")
	cmd.Flags().BoolVar(&lock, "lock", false, "place jobs by the admin's labels and the first GPU inventory reported, ignoring what the worker reports")
	cmd.Flags().BoolVar(&unlock, "unlock", false, "place jobs by the labels and GPU inventory the worker reports as well")
	return cmd
}

// labelPatch turns KEY=VALUE (set) and KEY- (remove) arguments into a JSON
// merge-patch of labels: a value to set, or nil to remove.
func labelPatch(args []string) (map[string]*string, error) {
	out := map[string]*string{}
	for _, a := range args {
		if k, ok := strings.CutSuffix(a, "-"); ok && !strings.Contains(a, "=") && strings.TrimSpace(k) != "" {
			if _, dup := out[k]; dup {
				return nil, usagef("label: the key %q is given twice", k)
			}
			out[k] = nil
			continue
		}
		set, err := parseLabels("label", []string{a})
		if err != nil {
			return nil, err
		}
		for k, v := range set {
			if _, dup := out[k]; dup {
				return nil, usagef("label: the key %q is given twice", k)
			}
			out[k] = &v
		}
	}
	return out, nil
}

// lockWord says how jobs are placed on a new worker.
func lockWord(locked bool) string {
	if locked {
		return "labels and GPU inventory locked"
	}
	return "unlocked: placed by what it reports"
}
