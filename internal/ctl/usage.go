package ctl

import (
	"net/url"
	"time"

	"github.com/spf13/cobra"

	"github.com/simpletuner/simpletuner-orchestration/internal/api"
	"github.com/simpletuner/simpletuner-orchestration/internal/ctl/output"
)

// dayLayout is how the usage API spells a day (UTC).
const dayLayout = "2006-01-02"

// usageCommand reports each team's share, limits, standing and GPU-hours
// per day, like Slurm's sreport: what an admin looks at to see whether the
// fleet is shared as configured.
func (a *app) usageCommand() *cobra.Command {
	var from, to string
	cmd := &cobra.Command{
		Use:   "usage [--from DAY] [--to DAY]",
		Short: "Show each team's share, limits, fair-share standing and GPU-hours per day",
		Long: `Show each team's share of the fleet's GPUs and its limits, the jobs and GPUs
it holds now, its queued jobs, its usage with the half-life applied, its
fair-share factor (what placement orders teams by: 1 for a team that used
nothing, 0.5 for one that used exactly its share), and its GPU-hours from
--from to --to; then the GPU-hours of each day, a column per team. Days are
YYYY-MM-DD in UTC, both included; by default the last 7 days up to today.
-o json prints the API's reply.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			q, err := usageQuery(from, to)
			if err != nil {
				return err
			}
			cl, err := a.client()
			if err != nil {
				return err
			}
			var reply api.Usage
			raw, err := cl.GetJSON(cmd.Context(), "/api/admin/usage", q, &reply)
			if err != nil {
				return err
			}
			if a.format == output.JSONFormat {
				return output.WriteJSON(a.out(), raw)
			}
			return a.renderer().usage(a.out(), reply)
		},
	}
	cmd.Flags().StringVar(&from, "from", "", "first day (YYYY-MM-DD, UTC); default 6 days before --to")
	cmd.Flags().StringVar(&to, "to", "", "last day (YYYY-MM-DD, UTC); default today")
	return cmd
}

// usageQuery checks the days here, so that a typo is a usage error naming
// the flag rather than a round trip.
func usageQuery(from, to string) (url.Values, error) {
	q := url.Values{}
	var days [2]time.Time
	for i, f := range []struct{ flag, v string }{{"--from", from}, {"--to", to}} {
		if f.v == "" {
			continue
		}
		d, err := time.Parse(dayLayout, f.v)
		if err != nil {
			return nil, usagef("%s %q: want a day as YYYY-MM-DD", f.flag, f.v)
		}
		days[i] = d
		q.Set(f.flag[2:], f.v)
	}
	if from != "" && to != "" && days[0].After(days[1]) {
		return nil, usagef("--from %s is after --to %s", from, to)
	}
	return q, nil
}

// completeTeams offers the teams the orchestrator knows (configured, or
// still holding jobs), read from the usage report.
func (a *app) completeTeams(cmd *cobra.Command, _ []string, _ string) ([]cobra.Completion, cobra.ShellCompDirective) {
	if err := a.prepare(); err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	cl, err := a.client()
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	var u api.Usage
	if _, err := cl.GetJSON(cmd.Context(), "/api/admin/usage", url.Values{}, &u); err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	var out []cobra.Completion
	for _, t := range u.Teams {
		if t.Configured {
			out = append(out, cobra.CompletionWithDesc(t.Team, "share "+pct(t.ShareFraction)))
		}
	}
	return out, cobra.ShellCompDirectiveNoFileComp
}

// whoamiCommand shows the credential simpletunerctl uses: who the
// orchestrator takes it for, its scopes and the team its jobs count against.
func (a *app) whoamiCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "whoami",
		Short: "Show the credential in use: who it is, roles, scopes, team and expiry",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := a.client()
			if err != nil {
				return err
			}
			var me api.Whoami
			raw, err := cl.GetJSON(cmd.Context(), "/api/auth/whoami", nil, &me)
			if err != nil {
				return err
			}
			if a.format == output.JSONFormat {
				return output.WriteJSON(a.out(), raw)
			}
			return a.renderer().whoami(a.out(), me, a.tokenSource)
		},
	}
}
