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

	"github.com/simpletuner/simpletuner-orchestration/daemon"
	"github.com/simpletuner/simpletuner-orchestration/internal/audit"
	"github.com/simpletuner/simpletuner-orchestration/internal/auth"
	"github.com/simpletuner/simpletuner-orchestration/internal/config"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator"
	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
)

// NewLogger builds the daemon's logger with a level that SIGHUP can change.
func NewLogger(level, format string) (*slog.Logger, *slog.LevelVar) {
	lv := new(slog.LevelVar)
	lv.Set(ParseLevel(level))
	base := daemon.NewLogger("debug", format, os.Stderr)
	return slog.New(levelFilter{base.Handler(), lv}), lv
}

type levelFilter struct {
	slog.Handler
	lv *slog.LevelVar
}

func (h levelFilter) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= h.lv.Level() && h.Handler.Enabled(ctx, l)
}
func (h levelFilter) WithAttrs(a []slog.Attr) slog.Handler {
	return levelFilter{h.Handler.WithAttrs(a), h.lv}
}
func (h levelFilter) WithGroup(n string) slog.Handler {
	return levelFilter{h.Handler.WithGroup(n), h.lv}
}

type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

// TokenCommand runs "token create|list|revoke" against the configured
// database directly (run it as root or the service user).
func TokenCommand(ctx context.Context, cfg *config.Orchestrator, args []string, out io.Writer, log *slog.Logger) error {
	if len(args) == 0 {
		return fmt.Errorf("usage: token create --name NAME --scope SCOPE [--scope …] | token list | token revoke ID")
	}
	st, _, err := OpenStore(ctx, cfg, log)
	if err != nil {
		return fmt.Errorf("opening the database: %w", err)
	}
	defer st.Close()
	actor := fmt.Sprintf("local:uid=%d", os.Getuid())
	switch args[0] {
	case "create":
		fs := flag.NewFlagSet("token create", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		name := fs.String("name", "", "token name")
		var scopes multiFlag
		fs.Var(&scopes, "scope", "scope (repeatable)")
		if err := fs.Parse(args[1:]); err != nil {
			return fmt.Errorf("token create: %v", err)
		}
		var list []string
		for _, s := range scopes {
			list = append(list, strings.Split(s, ",")...)
		}
		t, token, err := orchestrator.NewAdminToken(*name, list)
		if err != nil {
			return fmt.Errorf("token create: %v", err)
		}
		rec := audit.New(actor, "", "admin_token.create", "admin_token", t.ID, audit.Success,
			map[string]any{"name": t.Name, "scopes": t.Scopes, "token": auth.Accessor(token)})
		if err := st.CreateAdminToken(ctx, t, &rec); err != nil {
			return err
		}
		fmt.Fprintf(out, "%s\n", token)
		fmt.Fprintf(os.Stderr, "created admin token %s (%s) with scopes %s; it is shown only once\n", t.ID, t.Name, strings.Join(t.Scopes, ","))
		return nil
	case "list":
		ts, err := st.ListAdminTokens(ctx)
		if err != nil {
			return err
		}
		tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tNAME\tSCOPES\tCREATED\tREVOKED")
		for _, t := range ts {
			revoked := "-"
			if t.RevokedAt != nil {
				revoked = protocol.Time(*t.RevokedAt)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", t.ID, t.Name, strings.Join(t.Scopes, ","), protocol.Time(t.CreatedAt), revoked)
		}
		return tw.Flush()
	case "revoke":
		if len(args) != 2 {
			return fmt.Errorf("usage: token revoke ID")
		}
		rec := audit.New(actor, "", "admin_token.revoke", "admin_token", args[1], audit.Success, nil)
		if err := st.RevokeAdminToken(ctx, args[1], &rec); err != nil {
			return fmt.Errorf("token revoke %s: %w", args[1], err)
		}
		fmt.Fprintf(out, "revoked %s\n", args[1])
		return nil
	}
	return fmt.Errorf("unknown token subcommand %q (create, list, revoke)", args[0])
}
