package ctl

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/simpletuner/simpletuner-orchestration/internal/api"
	"github.com/simpletuner/simpletuner-orchestration/internal/ctl/client"
	"github.com/simpletuner/simpletuner-orchestration/internal/ctl/output"
)

// Approvals: jobs an approval rule held at submit wait for a lead of their
// team, or an admin (docs/approvals.md). Listing and deciding need
// queue.approve.

func (a *app) approvalsCommand() *cobra.Command {
	g := group("approvals", "List the jobs waiting for approval; approve or reject them",
		a.approvalsListCommand(), a.approvalsDecideCommand("approve"), a.approvalsDecideCommand("reject"))
	return g
}

func (a *app) approvalsListCommand() *cobra.Command {
	var all bool
	var status string
	var limit int
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the approval requests of your teams (pending ones unless --all or --status)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := a.client()
			if err != nil {
				return err
			}
			q := url.Values{"limit": {strconv.Itoa(limit)}}
			switch {
			case status != "":
				q.Set("status", status)
			case !all:
				q.Set("pending_only", "true")
			}
			var reply api.ApprovalRequests
			raw, err := cl.JSON(cmd.Context(), client.Request{Method: http.MethodGet, Path: "/api/approvals/requests", Query: q}, &reply)
			if err != nil {
				return err
			}
			if a.format == output.JSONFormat {
				return output.WriteJSON(a.out(), raw)
			}
			if len(reply.Requests) == 0 {
				_, err := fmt.Fprintln(a.out(), "no approval requests")
				return err
			}
			return a.renderer().approvals(a.out(), reply.Requests)
		},
	}
	cmd.Flags().BoolVar(&all, "all", false, "every request, decided ones too")
	cmd.Flags().StringVar(&status, "status", "", "only requests in this state: pending, approved, rejected or cancelled")
	cmd.Flags().IntVar(&limit, "limit", 50, "at most this many (1 to 200), newest first")
	return cmd
}

func (a *app) approvalsDecideCommand(action string) *cobra.Command {
	var notes, reason string
	cmd := &cobra.Command{
		Use:  action + " ID",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if action == "reject" && strings.TrimSpace(reason) == "" {
				return usagef("approvals reject: --reason is required (the submitter is told it)")
			}
			var reply api.ApprovalDecided
			raw, err := a.decide(cmd.Context(), args[0], action, api.ApprovalDecision{Notes: notes, Reason: reason}, &reply)
			if err != nil {
				return err
			}
			if a.format == output.JSONFormat {
				return output.WriteJSON(a.out(), raw)
			}
			_, err = fmt.Fprintf(a.out(), "request %d %s: job %s is %s\n", reply.RequestID, pastTense(action), reply.JobID,
				a.style.State(reply.Status))
			return err
		},
	}
	if action == "approve" {
		cmd.Short = "Approve a request (its number, or its job's id): the job joins the queue"
	} else {
		cmd.Short = "Reject a request (its number, or its job's id): the job ends cancelled with the reason"
		cmd.Flags().StringVar(&reason, "reason", "", "why (required; the job's error says who rejected it and why)")
	}
	cmd.Flags().StringVar(&notes, "notes", "", "notes kept with the decision")
	return cmd
}

func pastTense(action string) string {
	if action == "approve" {
		return "approved"
	}
	return "rejected"
}

// decide posts a decision on a request, named by number or by job id.
func (a *app) decide(ctx context.Context, ref, action string, body api.ApprovalDecision, reply any) ([]byte, error) {
	cl, err := a.client()
	if err != nil {
		return nil, err
	}
	path := "/api/approvals/requests/" + client.PathEscape(ref) + "/" + action
	if _, err := strconv.ParseInt(ref, 10, 64); err != nil {
		path = "/api/queue/" + client.PathEscape(ref) + "/" + action
	}
	return cl.JSON(ctx, client.Request{Method: http.MethodPost, Path: path, Body: body}, reply)
}

func (r renderer) approvals(w io.Writer, rs []api.ApprovalRequest) error {
	t := output.NewTable("ID", "JOB", "TEAM", "BY", "RULE", "REASON", r.style.Header("STATUS"))
	for _, q := range rs {
		t.Row(strconv.FormatInt(q.ID, 10), q.JobID, q.Team, q.RequestedBy, q.RuleName, output.Truncate(q.Reason, 48),
			r.style.State(q.Status))
	}
	return t.Write(w)
}
