package ctl

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/simpletuner/simpletuner-orchestration/internal/api"
	"github.com/simpletuner/simpletuner-orchestration/internal/ctl/client"
	"github.com/simpletuner/simpletuner-orchestration/internal/ctl/output"
	"github.com/simpletuner/simpletuner-orchestration/internal/webhook/spec"
)

// Webhook subscriptions: job and fleet events posted to a URL, signed
// (docs/webhooks.md).

func (a *app) webhooksCommand() *cobra.Command {
	return group("webhooks", "Subscribe URLs to job and fleet events; see what was delivered",
		a.webhooksListCommand(), a.webhooksCreateCommand(), a.webhooksShowCommand(), a.webhooksDeliveriesCommand(),
		a.webhooksDeleteCommand(), a.webhooksEventsCommand())
}

func (a *app) completeWebhooks(cmd *cobra.Command, args []string, _ string) ([]cobra.Completion, cobra.ShellCompDirective) {
	if len(args) > 0 {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	if err := a.prepare(); err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	subs, _, err := a.webhooks(cmd)
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	var out []cobra.Completion
	for _, s := range subs {
		out = append(out, cobra.CompletionWithDesc(s.Name, spec.Origin(s.URL)))
	}
	return out, cobra.ShellCompDirectiveNoFileComp
}

func (a *app) webhooks(cmd *cobra.Command) ([]spec.Subscription, []byte, error) {
	cl, err := a.client()
	if err != nil {
		return nil, nil, err
	}
	var reply api.WebhookList
	raw, err := cl.GetJSON(cmd.Context(), "/api/admin/webhooks", nil, &reply)
	return reply.Webhooks, raw, err
}

func (a *app) webhooksListCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List webhook subscriptions (never their secrets) with their pending and failed deliveries",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			subs, raw, err := a.webhooks(cmd)
			if err != nil {
				return err
			}
			if a.format == output.JSONFormat {
				return output.WriteJSON(a.out(), raw)
			}
			if len(subs) == 0 {
				_, err := fmt.Fprintln(a.out(), "no webhook subscriptions")
				return err
			}
			return a.renderer().webhooks(a.out(), subs)
		},
	}
}

func (a *app) webhooksCreateCommand() *cobra.Command {
	var (
		target, team, format, secretFile string
		events                           []string
	)
	cmd := &cobra.Command{
		Use:   "create NAME --url URL --event EVENT...",
		Short: "Subscribe a URL to events and print its signing secret (once)",
		Long: `Subscribe a URL to job and fleet events. Every request is signed with the
subscription's secret (HMAC-SHA256, header X-SimpleTuner-Signature); the secret
alone goes to standard output, once, so that it can be captured:
SECRET=$(simpletunerctl webhooks create ops --url https://… --event job.failed).
With --secret-file the secret is that file's and is not printed.
Events: a name (simpletunerctl webhooks events lists them), "*" for all, or a
family such as "job.*". --format slack posts a Slack incoming-webhook message
instead of the event's JSON.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if target == "" {
				return usagef("--url is required")
			}
			var list []string
			for _, e := range events {
				for p := range strings.SplitSeq(e, ",") {
					if p = strings.TrimSpace(p); p != "" {
						list = append(list, p)
					}
				}
			}
			if len(list) == 0 {
				return usagef("at least one --event is required (\"*\" for all)")
			}
			req := spec.CreateRequest{Name: args[0], URL: target, Events: list, Team: team, Format: format}
			if secretFile != "" {
				b, err := os.ReadFile(secretFile)
				if err != nil {
					return fmt.Errorf("--secret-file: %w", err)
				}
				req.Secret = strings.TrimRight(string(b), "\r\n")
			}
			cl, err := a.client()
			if err != nil {
				return err
			}
			var reply spec.Created
			raw, err := cl.JSON(cmd.Context(), client.Request{Method: http.MethodPost, Path: "/api/admin/webhooks", Body: req}, &reply)
			if err != nil {
				return err
			}
			if secretFile != "" {
				// The caller has the secret in its file: it is not written
				// out again, where it could end up in a terminal's history.
				return a.createdWithSecretFile(raw, reply, secretFile)
			}
			if a.format == output.JSONFormat {
				return output.WriteJSON(a.out(), raw)
			}
			fmt.Fprintln(a.out(), reply.Secret)
			a.note("created webhook subscription %s (%s) for %s; its signing secret is shown only once", reply.Name, reply.ID,
				strings.Join(reply.Events, ","))
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&target, "url", "", "the receiver's http(s) URL")
	f.StringArrayVar(&events, "event", nil, "event wanted (repeatable or comma-separated; \"*\" for all, \"job.*\" for a family)")
	f.StringVar(&team, "team", "", "only this team's jobs (\"\" for every team)")
	f.StringVar(&format, "format", "json", "json (the event) or slack (an incoming-webhook message)")
	f.StringVar(&secretFile, "secret-file", "", "file holding the signing secret to use (else the orchestrator makes one)")
	names := append([]string{"*"}, spec.Names()...)
	_ = cmd.RegisterFlagCompletionFunc("event", cobra.FixedCompletions(names, cobra.ShellCompDirectiveNoFileComp))
	_ = cmd.RegisterFlagCompletionFunc("format", cobra.FixedCompletions([]string{spec.FormatJSON, spec.FormatSlack}, cobra.ShellCompDirectiveNoFileComp))
	return cmd
}

// createdWithSecretFile reports a subscription made with --secret-file:
// everything but the secret.
func (a *app) createdWithSecretFile(raw []byte, reply spec.Created, secretFile string) error {
	if a.format == output.JSONFormat {
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(raw, &obj); err != nil {
			return fmt.Errorf("the orchestrator's reply: %w", err)
		}
		delete(obj, "secret")
		return output.MarshalJSON(a.out(), obj)
	}
	_, err := fmt.Fprintf(a.out(), "created webhook subscription %s (%s) for %s; it signs with the secret in %s\n",
		reply.Name, reply.ID, strings.Join(reply.Events, ","), secretFile)
	return err
}

func (a *app) webhooksShowCommand() *cobra.Command {
	return &cobra.Command{
		Use:               "show NAME",
		Short:             "Show a webhook subscription and its latest deliveries",
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: a.completeWebhooks,
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := a.client()
			if err != nil {
				return err
			}
			var sub spec.Subscription
			raw, err := cl.GetJSON(cmd.Context(), "/api/admin/webhooks/"+client.PathEscape(args[0]), nil, &sub)
			if err != nil {
				return err
			}
			if a.format == output.JSONFormat {
				return output.WriteJSON(a.out(), raw)
			}
			ds, _, err := a.deliveries(cmd, args[0], url.Values{"limit": {"10"}})
			if err != nil {
				return err
			}
			return a.renderer().webhook(a.out(), sub, ds)
		},
	}
}

func (a *app) deliveries(cmd *cobra.Command, name string, q url.Values) ([]spec.Delivery, []byte, error) {
	cl, err := a.client()
	if err != nil {
		return nil, nil, err
	}
	var reply api.DeliveryPage
	raw, err := cl.GetJSON(cmd.Context(), "/api/admin/webhooks/"+client.PathEscape(name)+"/deliveries", q, &reply)
	return reply.Deliveries, raw, err
}

func (a *app) webhooksDeliveriesCommand() *cobra.Command {
	var (
		state   string
		limit   int
		payload bool
	)
	cmd := &cobra.Command{
		Use:               "deliveries NAME",
		Short:             "The delivery log of a webhook subscription, newest first",
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: a.completeWebhooks,
		RunE: func(cmd *cobra.Command, args []string) error {
			if limit < 1 || limit > 500 {
				return usagef("--limit must be from 1 to 500")
			}
			q := url.Values{"limit": {strconv.Itoa(limit)}}
			if state != "" {
				q.Set("state", state)
			}
			if payload {
				q.Set("payload", "1")
			}
			ds, raw, err := a.deliveries(cmd, args[0], q)
			if err != nil {
				return err
			}
			if a.format == output.JSONFormat {
				return output.WriteJSON(a.out(), raw)
			}
			if len(ds) == 0 {
				_, err := fmt.Fprintln(a.out(), "no deliveries")
				return err
			}
			return a.renderer().deliveries(a.out(), ds)
		},
	}
	f := cmd.Flags()
	f.StringVar(&state, "state", "", "only deliveries in this state: pending, delivered or failed (given up)")
	f.IntVar(&limit, "limit", 50, "how many (1-500)")
	f.BoolVar(&payload, "payload", false, "with -o json, include each event's body")
	_ = cmd.RegisterFlagCompletionFunc("state", cobra.FixedCompletions([]string{"pending", "delivered", "failed"}, cobra.ShellCompDirectiveNoFileComp))
	return cmd
}

func (a *app) webhooksDeleteCommand() *cobra.Command {
	return &cobra.Command{
		Use:               "delete NAME",
		Short:             "Delete a webhook subscription and its delivery log",
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: a.completeWebhooks,
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := a.client()
			if err != nil {
				return err
			}
			var reply api.WebhookDeleted
			raw, err := cl.JSON(cmd.Context(), client.Request{Method: http.MethodDelete, Path: "/api/admin/webhooks/" + client.PathEscape(args[0])}, &reply)
			if err != nil {
				return err
			}
			if a.format == output.JSONFormat {
				return output.WriteJSON(a.out(), raw)
			}
			_, err = fmt.Fprintf(a.out(), "webhook subscription %s (%s) deleted\n", reply.Name, reply.ID)
			return err
		},
	}
}

func (a *app) webhooksEventsCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "events",
		Short: "List the events a subscription can ask for",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if a.format == output.JSONFormat {
				return output.MarshalJSON(a.out(), spec.Events)
			}
			t := output.NewTable("EVENT", "WHEN")
			for _, e := range spec.Events {
				t.Row(e.Name, e.What)
			}
			return t.Write(a.out())
		},
	}
}
