package ctl

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/spf13/cobra"

	"github.com/simpletuner/simpletuner-orchestration/internal/api"
	"github.com/simpletuner/simpletuner-orchestration/internal/ctl/client"
	"github.com/simpletuner/simpletuner-orchestration/internal/ctl/output"
)

// People: everyone who signed in through an identity provider
// (docs/auth.md). Listing, disabling and enabling them needs admin.people.

func (a *app) peopleCommand() *cobra.Command {
	return group("people", "List the people who signed in through an identity provider; disable and enable them",
		a.peopleListCommand(), a.peopleDisableCommand(), a.peopleEnableCommand())
}

// allPeople lists every person (of team, when set), oldest first, raw and
// decoded.
func (a *app) allPeople(ctx context.Context, team string) ([]api.Person, []json.RawMessage, error) {
	q := url.Values{}
	if team != "" {
		q.Set("team", team)
	}
	var raws []json.RawMessage
	err := a.eachPage(ctx, "/api/admin/people", q, "people", 1000, func(items []json.RawMessage) bool {
		raws = append(raws, items...)
		return false
	})
	if err != nil {
		return nil, nil, err
	}
	ps := make([]api.Person, len(raws))
	for i, r := range raws {
		if err := json.Unmarshal(r, &ps[i]); err != nil {
			return nil, nil, fmt.Errorf("GET /api/admin/people: entry %d is not a person: %v", i, err)
		}
	}
	return ps, raws, nil
}

func (a *app) completePeople(cmd *cobra.Command, args []string, _ string) ([]cobra.Completion, cobra.ShellCompDirective) {
	if len(args) > 0 || a.prepare() != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	ps, _, err := a.allPeople(cmd.Context(), "")
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	var out []cobra.Completion
	for _, p := range ps {
		out = append(out, cobra.CompletionWithDesc(p.ID, first(p.Username, p.Email, p.Name)))
	}
	return out, cobra.ShellCompDirectiveNoFileComp
}

func (a *app) peopleListCommand() *cobra.Command {
	var team string
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the people who signed in, with the memberships they hold now",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			ps, raws, err := a.allPeople(cmd.Context(), team)
			if err != nil {
				return err
			}
			if a.format == output.JSONFormat {
				if raws == nil {
					raws = []json.RawMessage{}
				}
				// The API's shape, with every page in one list.
				return output.MarshalJSON(a.out(), struct {
					People []json.RawMessage `json:"people"`
					Total  int               `json:"total"`
				}{raws, len(raws)})
			}
			if len(ps) == 0 && team != "" {
				_, err := fmt.Fprintf(a.out(), "nobody holds a role in team %s\n", team)
				return err
			}
			if len(ps) == 0 {
				_, err := fmt.Fprintln(a.out(), "no people have signed in")
				return err
			}
			return a.renderer().people(a.out(), ps)
		},
	}
	cmd.Flags().StringVar(&team, "team", "", "only the people who hold a role in this team now")
	_ = cmd.RegisterFlagCompletionFunc("team", a.completeTeams)
	return cmd
}

func (a *app) peopleDisableCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "disable ID",
		Short: "Disable a person: revoke their tokens, end their dashboard sessions, refuse their sign-ins",
		Long: `Disable a person (by id, p_…). In one step every admin token of theirs is
revoked and every dashboard session of theirs ends, so their next request is
refused; they cannot sign in again until enabled. Disabling twice is harmless.`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: a.completePeople,
		RunE: func(cmd *cobra.Command, args []string) error {
			var reply api.PersonDisabled
			raw, err := a.personCall(cmd.Context(), args[0], "disable", &reply)
			if err != nil {
				return err
			}
			if a.format == output.JSONFormat {
				return output.WriteJSON(a.out(), raw)
			}
			_, err = fmt.Fprintf(a.out(), "person %s (%s) %s: %d tokens revoked, %d dashboard sessions ended\n", reply.Person.ID,
				personName(reply.Person), a.style.State("disabled"), reply.TokensRevoked, reply.SessionsEnded)
			return err
		},
	}
}

func (a *app) peopleEnableCommand() *cobra.Command {
	return &cobra.Command{
		Use:               "enable ID",
		Short:             "Let a disabled person sign in again (their revoked tokens stay revoked)",
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: a.completePeople,
		RunE: func(cmd *cobra.Command, args []string) error {
			var reply api.Person
			raw, err := a.personCall(cmd.Context(), args[0], "enable", &reply)
			if err != nil {
				return err
			}
			if a.format == output.JSONFormat {
				return output.WriteJSON(a.out(), raw)
			}
			_, err = fmt.Fprintf(a.out(), "person %s (%s) %s\n", reply.ID, personName(reply), a.style.State("enabled"))
			return err
		},
	}
}

// personCall posts to /api/admin/people/{id}/{action}.
func (a *app) personCall(ctx context.Context, id, action string, reply any) ([]byte, error) {
	cl, err := a.client()
	if err != nil {
		return nil, err
	}
	return cl.JSON(ctx, client.Request{Method: http.MethodPost,
		Path: "/api/admin/people/" + client.PathEscape(id) + "/" + action}, reply)
}

// personName is how a person is named in a line: their user name, else
// email, else name.
func personName(p api.Person) string { return first(p.Username, p.Email, p.Name, "-") }

// membershipsText writes memberships as team:role, the fleet as "fleet:admin".
func membershipsText(ms []api.Membership) string {
	parts := make([]string, 0, len(ms))
	for _, m := range ms {
		parts = append(parts, first(m.Team, "fleet")+":"+m.Role)
	}
	return first(strings.Join(parts, ","), "-")
}

// peopleTeamsWidth bounds the memberships column of the people table.
const peopleTeamsWidth = 20

func (r renderer) people(w io.Writer, ps []api.Person) error {
	var t *output.Table
	if r.wide {
		t = output.NewTable("ID", "USERNAME", "NAME", "EMAIL", "PROVIDER", "MEMBERSHIPS", "OVERRIDES", "CREATED", "LAST SIGN-IN",
			r.style.Header("STATE"))
	} else {
		t = output.NewTable("ID", "USERNAME", "MEMBERSHIPS", "SIGNED IN", r.style.Header("STATE"))
	}
	for _, p := range ps {
		state := "active"
		if p.DisabledAt != nil {
			state = "disabled"
		}
		if r.wide {
			overrides := "-"
			if p.Overrides != nil {
				overrides = membershipsText(p.Overrides)
			}
			t.Row(p.ID, first(p.Username, "-"), first(p.Name, "-"), first(p.Email, "-"), p.Provider, membershipsText(p.Memberships),
				overrides, p.CreatedAt, p.LastSignIn, r.style.State(state))
			continue
		}
		t.Row(p.ID, output.Truncate(personName(p), nameWidth), output.Truncate(membershipsText(p.Memberships), peopleTeamsWidth),
			r.age(&p.LastSignIn), r.style.State(state))
	}
	return t.Write(w)
}
