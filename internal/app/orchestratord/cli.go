package orchestratord

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/simpletuner/simpletuner-orchestration/internal/audit"
	"github.com/simpletuner/simpletuner-orchestration/internal/auth"
	"github.com/simpletuner/simpletuner-orchestration/internal/config"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator/adminapi"
	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
	"github.com/simpletuner/simpletuner-orchestration/internal/store"
)

type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

const tokenUsage = `usage: simpletuner-orchestratord [--config FILE] token COMMAND
  token create --name NAME --scope SCOPE [--scope SCOPE…] [--team TEAM] [--max-priority N]
                                                           print a new admin token (shown once)
  token list                                               list admin tokens (never the tokens themselves)
  token revoke ID                                          revoke a token at once

The command talks to the running orchestrator over its admin socket when the
socket answers (server.admin_socket; root or members of server.admin_group),
else it writes to the database of the configuration given with --config. It
never creates a database: pass the same --config the orchestrator runs with.
Scopes: admin.workers, admin.audit, queue.submit, queue.view, queue.cancel,
queue.manage, or * for all. --team puts the token's jobs in a team of
[[teams]] (its share and limits); without it, the default team.
--max-priority N lets the token's jobs have priorities up to N (0 to 50)
in place of its team's max_priority.`

// wantsHelp reports whether token arguments ask for help.
func wantsHelp(args []string) bool {
	for _, a := range args {
		if a == "-h" || a == "-help" || a == "--help" || a == "help" {
			return true
		}
	}
	return false
}

// tokenArgs is a parsed token subcommand.
type tokenArgs struct {
	verb   string
	name   string
	scopes []string
	team   string // "" or "default": the default team
	// maxPriority is the priority granted with --max-priority; nil without.
	maxPriority *int
	id          string
}

// parseTokenArgs reads "create|list|revoke ..."; what it refuses is a
// *config.UsageError naming the flag or argument.
func parseTokenArgs(args []string) (tokenArgs, error) {
	t := tokenArgs{verb: args[0]}
	usagef := func(format string, a ...any) (tokenArgs, error) {
		return t, &config.UsageError{Err: fmt.Errorf(format, a...)}
	}
	switch t.verb {
	case "create":
		fs := flag.NewFlagSet("token create", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		fs.StringVar(&t.name, "name", "", "token name")
		var scopes multiFlag
		fs.Var(&scopes, "scope", "scope (repeatable)")
		fs.StringVar(&t.team, "team", "", "the team of the token's jobs")
		maxPriority := fs.Int("max-priority", 0, "the highest priority the token's jobs may have")
		if err := fs.Parse(args[1:]); err != nil {
			return usagef("token create: %v\n%s", err, tokenUsage)
		}
		fs.Visit(func(f *flag.Flag) {
			if f.Name == "max-priority" {
				t.maxPriority = maxPriority
			}
		})
		if fs.NArg() > 0 {
			return usagef("token create: unexpected argument %q; the name goes in --name", fs.Arg(0))
		}
		for _, s := range scopes {
			t.scopes = append(t.scopes, strings.Split(s, ",")...)
		}
		switch {
		case strings.TrimSpace(t.name) == "":
			return usagef("token create: --name is required")
		case len(t.scopes) == 0:
			return usagef("token create: --scope is required (%s, or * for all)", strings.Join(auth.AllScopes(), ", "))
		}
		if _, _, err := adminapi.NewAdminToken(t.name, t.scopes); err != nil {
			return usagef("token create: --scope: %v", err)
		}
		if t.team = strings.TrimSpace(t.team); t.team != "" {
			if err := config.CheckTeamName(t.team); err != nil {
				return usagef("token create: --team: %v", err)
			}
		}
		if err := adminapi.CheckTokenMaxPriority(t.scopes, t.maxPriority); err != nil {
			return usagef("token create: --max-priority: %v", err)
		}
	case "list":
		if len(args) != 1 {
			return usagef("token list takes no argument")
		}
	case "revoke":
		if len(args) != 2 {
			return usagef("token revoke needs one argument, the token's ID")
		}
		t.id = args[1]
	default:
		return usagef("unknown token command %q (create, list, revoke)\n%s", t.verb, tokenUsage)
	}
	return t, nil
}

// TokenCommand runs "token create|list|revoke": through the running
// orchestrator's admin socket when it answers, else against the configured
// database, which must already exist. It says on stderr which it used.
func TokenCommand(ctx context.Context, cfg *config.Orchestrator, configPath string, args []string, stdout, stderr io.Writer, log *slog.Logger) error {
	t, err := parseTokenArgs(args)
	if err != nil {
		return err
	}
	if c := adminSocketClient(cfg.Server.AdminSocket); c != nil {
		return t.viaAPI(ctx, c, cfg.Server.AdminSocket, stdout, stderr)
	}
	st, desc, err := OpenExistingStore(ctx, cfg, log)
	if err != nil {
		return fmt.Errorf("%w\n(the configuration read was %s; pass the --config the orchestrator runs with)", err, configPath)
	}
	defer st.Close()
	if t.team, err = configuredTeam(cfg, t.team); err != nil {
		return err
	}
	return t.viaStore(ctx, st, desc, stdout, stderr)
}

// configuredTeam checks a token's team against [[teams]] of the
// configuration read, as the running orchestrator checks its own: a token of
// a team it does not know could submit nothing. The default team is "".
func configuredTeam(cfg *config.Orchestrator, team string) (string, error) {
	if team == "" || team == config.DefaultTeam {
		return "", nil
	}
	var names []string
	for _, t := range cfg.TeamsOrDefault() {
		if t.Name == team {
			return team, nil
		}
		names = append(names, t.Name)
	}
	return "", fmt.Errorf("token create: --team: unknown team %q; the teams are %s (set them in [[teams]] of the configuration)", team, strings.Join(names, ", "))
}

// teamOrDefault names the default team, which tokens store as "".
func teamOrDefault(team string) string {
	if team == "" {
		return config.DefaultTeam
	}
	return team
}

func (t tokenArgs) viaStore(ctx context.Context, st store.Store, desc string, stdout, stderr io.Writer) error {
	actor := fmt.Sprintf("local:uid=%d", os.Getuid())
	switch t.verb {
	case "create":
		tok, token, err := adminapi.NewAdminToken(t.name, t.scopes)
		if err != nil {
			return err
		}
		tok.Team = t.team
		tok.MaxPriority = t.maxPriority
		details := map[string]any{"name": tok.Name, "scopes": tok.Scopes, "team": teamOrDefault(tok.Team), "token": auth.Accessor(token)}
		if t.maxPriority != nil {
			details["max_priority"] = *t.maxPriority
		}
		rec := audit.New(actor, "", "admin_token.create", "admin_token", tok.ID, audit.Success, details)
		if err := st.CreateAdminToken(ctx, tok, &rec); err != nil {
			return err
		}
		fmt.Fprintln(stdout, token)
		fmt.Fprintf(stderr, "created admin token %s (%s) with scopes %s in team %s in %s; it is shown only once\n",
			tok.ID, tok.Name, strings.Join(tok.Scopes, ","), teamOrDefault(tok.Team), desc)
	case "list":
		ts, err := st.ListAdminTokens(ctx)
		if err != nil {
			return err
		}
		rows := make([]tokenRow, 0, len(ts))
		for _, x := range ts {
			r := tokenRow{ID: x.ID, Name: x.Name, Scopes: x.Scopes, Team: teamOrDefault(x.Team), MaxPriority: x.MaxPriority, CreatedAt: protocol.Time(x.CreatedAt)}
			if x.RevokedAt != nil {
				r.RevokedAt = protocol.Time(*x.RevokedAt)
			}
			rows = append(rows, r)
		}
		fmt.Fprintf(stderr, "admin tokens in %s\n", desc)
		return printTokens(stdout, rows)
	case "revoke":
		rec := audit.New(actor, "", "admin_token.revoke", "admin_token", t.id, audit.Success, nil)
		if err := st.RevokeAdminToken(ctx, t.id, &rec); err != nil {
			return fmt.Errorf("token revoke %s: %w", t.id, err)
		}
		fmt.Fprintf(stdout, "revoked %s in %s\n", t.id, desc)
	}
	return nil
}

type tokenRow struct {
	ID          string   `json:"id"`
	Name        string   `json:"name"`
	Scopes      []string `json:"scopes"`
	Team        string   `json:"team"`
	MaxPriority *int     `json:"max_priority"`
	CreatedAt   string   `json:"created_at"`
	RevokedAt   string   `json:"revoked_at"`
}

func printTokens(out io.Writer, rows []tokenRow) error {
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tNAME\tSCOPES\tTEAM\tMAX PRIORITY\tCREATED\tREVOKED")
	for _, r := range rows {
		revoked := r.RevokedAt
		if revoked == "" {
			revoked = "-"
		}
		granted := "team" // the team's max_priority
		if r.MaxPriority != nil {
			granted = fmt.Sprint(*r.MaxPriority)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.ID, r.Name, strings.Join(r.Scopes, ","), teamOrDefault(r.Team), granted, r.CreatedAt, revoked)
	}
	return tw.Flush()
}
