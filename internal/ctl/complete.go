package ctl

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/simpletuner/simpletuner-orchestration/internal/api"
)

// Shell completion of ids and names asks the orchestrator, briefly; when it
// cannot, completion offers nothing rather than hanging the shell.

const completeTimeout = 3 * time.Second

func (a *app) completeWorkers(cmd *cobra.Command, args []string, _ string) ([]cobra.Completion, cobra.ShellCompDirective) {
	if len(args) > 0 && cmd.Name() != "labels" {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	if len(args) > 0 {
		return nil, cobra.ShellCompDirectiveNoSpace | cobra.ShellCompDirectiveNoFileComp
	}
	ctx, cancel := context.WithTimeout(context.Background(), completeTimeout)
	defer cancel()
	ws, _, err := a.allWorkers(ctx, "")
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	names := map[string]int{}
	for _, w := range ws {
		names[w.Name]++
	}
	var out []cobra.Completion
	for _, w := range ws {
		desc := fmt.Sprintf("%s, %s", w.WorkerID, w.Status)
		if names[w.Name] == 1 {
			out = append(out, cobra.CompletionWithDesc(w.Name, desc))
		} else {
			out = append(out, cobra.CompletionWithDesc(w.WorkerID, w.Name+", "+w.Status))
		}
	}
	return out, cobra.ShellCompDirectiveNoFileComp
}

func (a *app) completeJobs(cmd *cobra.Command, args []string, _ string) ([]cobra.Completion, cobra.ShellCompDirective) {
	if len(args) > 0 && cmd.Name() != "cancel" {
		return nil, cobra.ShellCompDirectiveDefault // download's PATH: no completion from here
	}
	ctx, cancel := context.WithTimeout(context.Background(), completeTimeout)
	defer cancel()
	jobs, _, _, err := a.newestJobs(ctx, nil, 50, nil)
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	out := make([]cobra.Completion, 0, len(jobs))
	for _, j := range jobs {
		out = append(out, cobra.CompletionWithDesc(j.JobID, j.Status+", "+configText(j)))
	}
	return out, cobra.ShellCompDirectiveNoFileComp | cobra.ShellCompDirectiveKeepOrder
}

func (a *app) completeTokens(cmd *cobra.Command) ([]cobra.Completion, cobra.ShellCompDirective) {
	ctx, cancel := context.WithTimeout(context.Background(), completeTimeout)
	defer cancel()
	cl, err := a.client()
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	var reply api.TokenList
	if _, err := cl.GetJSON(ctx, "/api/admin/tokens", nil, &reply); err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	var out []cobra.Completion
	for _, t := range reply.Tokens {
		if t.RevokedAt == nil {
			out = append(out, cobra.CompletionWithDesc(t.ID, t.Name))
		}
	}
	return out, cobra.ShellCompDirectiveNoFileComp
}
