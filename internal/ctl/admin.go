package ctl

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/simpletuner/simpletuner-orchestration/internal/api"
	"github.com/simpletuner/simpletuner-orchestration/internal/audit"
	"github.com/simpletuner/simpletuner-orchestration/internal/ctl/client"
	"github.com/simpletuner/simpletuner-orchestration/internal/ctl/output"
)

func (a *app) adminCommands() []*cobra.Command {
	return []*cobra.Command{
		group("tokens", "List, create and revoke admin tokens", a.tokensListCommand(), a.tokensCreateCommand(), a.tokensRevokeCommand()),
		a.auditCommand(),
		a.webhooksCommand(),
		a.peopleCommand(),
		a.approvalsCommand(),
		a.usageCommand(),
		a.whoamiCommand(),
		a.statusCommand(),
	}
}

func (a *app) tokensListCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List admin tokens (never their secrets)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := a.client()
			if err != nil {
				return err
			}
			var reply api.TokenList
			raw, err := cl.GetJSON(cmd.Context(), "/api/admin/tokens", nil, &reply)
			if err != nil {
				return err
			}
			if a.format == output.JSONFormat {
				return output.WriteJSON(a.out(), raw)
			}
			if len(reply.Tokens) == 0 {
				_, err := fmt.Fprintln(a.out(), "no admin tokens")
				return err
			}
			return a.renderer().tokens(a.out(), reply.Tokens)
		},
	}
}

func (a *app) tokensCreateCommand() *cobra.Command {
	var (
		name, team  string
		scopes      []string
		maxPriority int
	)
	cmd := &cobra.Command{
		Use:   "create --name NAME --scope SCOPE... [--team TEAM] [--max-priority N]",
		Short: "Create an admin token and print it (once)",
		Long: `Create an admin token. The token alone goes to standard output, once, so that
it can be captured: TOKEN=$(simpletunerctl tokens create --name ci --scope queue.submit).
Scopes: admin.workers, admin.audit, admin.webhooks, admin.people, queue.submit,
queue.view, queue.cancel, queue.manage, * (everything). --team puts the token's jobs in a
team of [[teams]] (its share and limits); without it, the default team.
--max-priority lets the token submit jobs of priorities up to N (0 to 50) in
place of its team's max_priority (the default priority, 10, unless [[teams]]
says otherwise); a token with scope * may give any priority.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if strings.TrimSpace(name) == "" {
				return usagef("--name is required")
			}
			var list []string
			for _, s := range scopes {
				for _, p := range strings.Split(s, ",") {
					if p = strings.TrimSpace(p); p != "" {
						list = append(list, p)
					}
				}
			}
			if len(list) == 0 {
				return usagef("at least one --scope is required")
			}
			cl, err := a.client()
			if err != nil {
				return err
			}
			body := api.CreateToken{Name: name, Scopes: list, Team: strings.TrimSpace(team)}
			if cmd.Flags().Changed("max-priority") {
				body.MaxPriority = &maxPriority
			}
			var reply api.TokenCreated
			raw, err := cl.JSON(cmd.Context(), client.Request{Method: http.MethodPost, Path: "/api/admin/tokens", Body: body}, &reply)
			if err != nil {
				return err
			}
			if a.format == output.JSONFormat {
				return output.WriteJSON(a.out(), raw)
			}
			fmt.Fprintln(a.out(), reply.Token)
			granted := ""
			if reply.MaxPriority != nil {
				granted = fmt.Sprintf(", priorities up to %d", *reply.MaxPriority)
			}
			a.note("created admin token %s (%s) with scopes %s in team %s%s; it is shown only once", reply.ID, reply.Name,
				strings.Join(reply.Scopes, ","), first(reply.Team, "default"), granted)
			return nil
		},
	}
	cmd.Flags().StringVar(&name, "name", "", "a name that says who or what uses the token")
	cmd.Flags().StringArrayVar(&scopes, "scope", nil, "scope granted (repeatable or comma-separated)")
	cmd.Flags().StringVar(&team, "team", "", "the team of [[teams]] the token's jobs belong to (default: the default team)")
	cmd.Flags().IntVar(&maxPriority, "max-priority", 0, "the highest priority the token's jobs may have, 0 to 50 (default: its team's max_priority)")
	_ = cmd.RegisterFlagCompletionFunc("team", a.completeTeams)
	_ = cmd.RegisterFlagCompletionFunc("scope", cobra.FixedCompletions([]string{"admin.workers", "admin.audit", "admin.webhooks", "admin.people", "queue.submit",
		"queue.view", "queue.cancel", "queue.manage", "*"}, cobra.ShellCompDirectiveNoFileComp))
	return cmd
}

func (a *app) tokensRevokeCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "revoke ID",
		Short: "Revoke an admin token (by id, name or id prefix)",
		Args:  cobra.ExactArgs(1),
		ValidArgsFunction: func(cmd *cobra.Command, args []string, _ string) ([]cobra.Completion, cobra.ShellCompDirective) {
			if len(args) > 0 {
				return nil, cobra.ShellCompDirectiveNoFileComp
			}
			return a.completeTokens(cmd)
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			t, err := a.resolveToken(ctx, args[0])
			if err != nil {
				return err
			}
			cl, err := a.client()
			if err != nil {
				return err
			}
			raw, err := cl.JSON(ctx, client.Request{Method: http.MethodDelete, Path: "/api/admin/tokens/" + client.PathEscape(t.ID)}, nil)
			if err != nil {
				return err
			}
			if a.format == output.JSONFormat {
				return output.WriteJSON(a.out(), raw)
			}
			_, err = fmt.Fprintf(a.out(), "token %s (%s) %s\n", t.ID, t.Name, a.style.State("revoked"))
			return err
		},
	}
}

func (a *app) auditRecords(ctx context.Context, since int64, limit int) ([]audit.Record, []json.RawMessage, error) {
	recs, raws, _, err := a.auditPage(ctx, since, limit)
	return recs, raws, err
}

// auditPage reads a page of GET /api/admin/audit: its records, as decoded
// and as sent, and the last record retention deleted (nil when none).
func (a *app) auditPage(ctx context.Context, since int64, limit int) ([]audit.Record, []json.RawMessage, *api.AuditLink, error) {
	q := url.Values{"since": {strconv.FormatInt(since, 10)}, "limit": {strconv.Itoa(limit)}}
	p, err := a.getPage(ctx, "/api/admin/audit", q, "records")
	if err != nil {
		return nil, nil, nil, err
	}
	recs := make([]audit.Record, len(p.items))
	for i, r := range p.items {
		if err := json.Unmarshal(r, &recs[i]); err != nil {
			return nil, nil, nil, fmt.Errorf("GET /api/admin/audit: record %d is not an audit record: %v", i, err)
		}
	}
	var checkpoint *api.AuditLink
	if err := json.Unmarshal(p.raw["checkpoint"], &checkpoint); p.raw["checkpoint"] != nil && err != nil {
		return nil, nil, nil, fmt.Errorf("GET /api/admin/audit: the checkpoint is not a record link: %v", err)
	}
	return recs, p.items, checkpoint, nil
}

// lastAuditSeq finds the newest record's sequence number. The API pages
// forwards from a sequence number only, so it gallops and then bisects:
// about 2·log2(n) requests of one record each.
func (a *app) lastAuditSeq(ctx context.Context) (int64, error) {
	after := func(s int64) (bool, error) {
		recs, _, err := a.auditRecords(ctx, s, 1)
		return len(recs) > 0, err
	}
	some, err := after(0)
	if err != nil || !some {
		return 0, err
	}
	lo, hi := int64(0), int64(1) // records exist after lo; unknown after hi
	for {
		ok, err := after(hi)
		if err != nil {
			return 0, err
		}
		if !ok {
			break
		}
		lo, hi = hi, hi*2
	}
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		ok, err := after(mid)
		if err != nil {
			return 0, err
		}
		if ok {
			lo = mid
		} else {
			hi = mid
		}
	}
	return hi, nil
}

func (a *app) auditCommand() *cobra.Command {
	var (
		since    int64
		limit    int
		follow   bool
		interval time.Duration
	)
	cmd := &cobra.Command{
		Use:   "audit",
		Short: "Show the audit log (newest records, or those after --since); verify its hash chain",
		Long: `Show the hash-chained audit log: the newest --limit records, or the records
after sequence number --since. --follow keeps printing new records as they are
written (as JSON lines with -o json). "audit verify" checks the whole chain.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			if limit < 0 {
				return usagef("--limit must not be negative")
			}
			if interval < 100*time.Millisecond {
				return usagef("--interval must be at least 100ms")
			}
			if !cmd.Flags().Changed("since") {
				last, err := a.lastAuditSeq(ctx)
				if err != nil {
					return err
				}
				since = max(0, last-int64(limit))
				if limit == 0 {
					since = 0
				}
			}
			r := a.renderer()
			var (
				all    []json.RawMessage
				shown  int
				header = a.format != output.JSONFormat
			)
			// print writes a batch; it returns the sequence number to read after.
			print := func(recs []audit.Record, raws []json.RawMessage) {
				if a.format == output.JSONFormat {
					if follow {
						for _, raw := range raws {
							fmt.Fprintln(a.out(), compactRaw(raw))
						}
					} else {
						all = append(all, raws...)
					}
					return
				}
				if header {
					r.auditHeader(a.out())
					header = false
				}
				r.auditRows(a.out(), recs)
			}
			for limit == 0 || shown < limit || follow {
				page := 1000
				if limit > 0 && !follow {
					page = min(page, limit-shown)
				}
				recs, raws, err := a.auditRecords(ctx, since, page)
				if err != nil {
					if follow && (ctx.Err() != nil) {
						return nil
					}
					if follow && transient(err) {
						if !sleepCtx(ctx, interval) {
							return nil
						}
						continue
					}
					return err
				}
				if len(recs) > 0 {
					print(recs, raws)
					shown += len(recs)
					since = recs[len(recs)-1].Seq
				}
				if len(recs) == page {
					continue
				}
				if !follow {
					break
				}
				if !sleepCtx(ctx, interval) {
					return nil
				}
			}
			if a.format == output.JSONFormat && !follow {
				if all == nil {
					all = []json.RawMessage{}
				}
				return output.MarshalJSON(a.out(), map[string]any{"records": all, "count": len(all)})
			}
			if header && !follow {
				fmt.Fprintln(a.out(), "no audit records")
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.Int64Var(&since, "since", 0, "show the records after this sequence number")
	f.IntVar(&limit, "limit", 50, "show at most this many records (0: all)")
	f.BoolVarP(&follow, "follow", "f", false, "keep printing new records until interrupted")
	f.DurationVar(&interval, "interval", time.Second, "how often --follow asks for new records")
	cmd.AddCommand(a.auditVerifyCommand())
	return cmd
}

func compactRaw(raw json.RawMessage) string {
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		return string(raw)
	}
	return b.String()
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	select {
	case <-ctx.Done():
		return false
	case <-time.After(d):
		return true
	}
}

// auditVerdict is what "audit verify -o json" prints.
type auditVerdict struct {
	OK       bool   `json:"ok"`
	Records  int64  `json:"records"`
	FirstSeq int64  `json:"first_seq,omitempty"`
	LastSeq  int64  `json:"last_seq,omitempty"`
	LastHash string `json:"last_hash,omitempty"`
	// CheckpointSeq is where the walk started when retention had deleted
	// the records before it.
	CheckpointSeq int64  `json:"checkpoint_seq,omitempty"`
	Error         string `json:"error,omitempty"`
}

func (a *app) auditVerifyCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "verify",
		Short: "Check the audit log's hash chain from its first record to its last",
		Long: `Read the whole audit log and check that every record's hash matches its
content and links to the record before it. Exits 1 and names the first bad
record when the chain is broken.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			v, err := a.verifyAudit(cmd.Context())
			if err != nil {
				return err
			}
			if a.format == output.JSONFormat {
				if err := output.MarshalJSON(a.out(), v); err != nil {
					return err
				}
				if !v.OK {
					return &silentError{ExitFailed}
				}
				return nil
			}
			if !v.OK {
				return fmt.Errorf("audit chain broken after %d good records: %s", v.Records, v.Error)
			}
			if v.Records == 0 {
				_, err := fmt.Fprintln(a.out(), "audit log is empty")
				return err
			}
			from := ""
			if v.CheckpointSeq > 0 {
				from = fmt.Sprintf(" from the retention checkpoint at seq %d", v.CheckpointSeq)
			}
			_, err = fmt.Fprintf(a.out(), "audit chain intact: %d records (seq %d-%d)%s, last hash %s\n", v.Records, v.FirstSeq, v.LastSeq, from, v.LastHash)
			return err
		},
	}
}

// verifyAudit walks the chain page by page, checking each page against the
// last record of the one before. Where retention has deleted the oldest
// records, the walk starts from the checkpoint the orchestrator names (the
// last record deleted): the first record left must link to it. A transport
// error is returned as an error; a broken chain as a verdict.
func (a *app) verifyAudit(ctx context.Context) (auditVerdict, error) {
	var v auditVerdict
	prevSeq, prevHash := int64(0), audit.Genesis
	since := int64(0)
	for {
		recs, _, cp, err := a.auditPage(ctx, since, 1000)
		if err != nil {
			return v, err
		}
		if len(recs) == 0 {
			v.OK = true
			return v, nil
		}
		if v.FirstSeq == 0 {
			v.FirstSeq = recs[0].Seq
			if recs[0].Seq != 1 {
				if cp == nil || cp.Seq != recs[0].Seq-1 {
					v.Error = fmt.Sprintf("the log starts at record %d: the records before it are missing", recs[0].Seq)
					return v, nil
				}
				// Deleted by retention; the chain goes on from the checkpoint.
				prevSeq, prevHash, v.CheckpointSeq = cp.Seq, cp.Hash, cp.Seq
			}
		}
		if err := audit.VerifyFrom(prevSeq, prevHash, recs); err != nil {
			v.Error = err.Error()
			// Count the good records of this page for the message.
			for i := range recs {
				if audit.VerifyFrom(prevSeq, prevHash, recs[:i+1]) != nil {
					break
				}
				v.Records++
			}
			return v, nil
		}
		last := recs[len(recs)-1]
		prevSeq, prevHash = last.Seq, last.Hash
		v.Records += int64(len(recs))
		v.LastSeq, v.LastHash = last.Seq, last.Hash
		since = last.Seq
	}
}

func (a *app) statusCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "status",
		Short: "Show the orchestrator's health, version, store, workers and queue",
		Long: `Show the orchestrator's health and readiness, its version and store (where it
reports them), and a summary of workers and the queue. Exits 1 when the
orchestrator is not ready.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			cl, err := a.client()
			if err != nil {
				return err
			}
			rep := statusReport{Endpoint: cl.Endpoint()}
			health, _, err := rawGet(ctx, cl, "/healthz")
			if err != nil {
				return err
			}
			ready, readyStatus, err := rawGet(ctx, cl, "/readyz")
			if err != nil {
				return err
			}
			rep.Health, rep.Ready, rep.ReadyOK = health, ready, readyStatus == http.StatusOK
			stats, statsErr := cl.GetJSON(ctx, "/api/queue/stats", nil, nil)
			if statsErr != nil {
				rep.StatsError = statsErr.Error()
			} else {
				rep.Stats = stats
			}
			if a.format == output.JSONFormat {
				err = output.MarshalJSON(a.out(), rep)
			} else {
				err = a.renderer().status(a.out(), rep)
			}
			if err != nil {
				return err
			}
			if statsErr != nil && exitCode(statsErr) == ExitAuth {
				return &silentError{ExitAuth}
			}
			if !rep.ReadyOK {
				return &silentError{ExitFailed}
			}
			return nil
		},
	}
}

// rawGet fetches a health endpoint, whose error answers (503 from /readyz)
// still carry the JSON to show. A body that is not JSON is wrapped as a string.
func rawGet(ctx context.Context, cl *client.Client, path string) (json.RawMessage, int, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	res, err := cl.Send(ctx, client.Request{Method: http.MethodGet, Path: path})
	if err != nil {
		return nil, 0, err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(io.LimitReader(res.Body, 1<<20))
	if err != nil {
		return nil, res.StatusCode, &client.ConnError{Endpoint: cl.Endpoint(), Err: err}
	}
	if !json.Valid(b) {
		s, _ := json.Marshal(map[string]string{"status": strings.TrimSpace(string(b))})
		return s, res.StatusCode, nil
	}
	return b, res.StatusCode, nil
}
