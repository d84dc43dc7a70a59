package orchestratord

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
)

// adminSocketClient returns an HTTP client for the orchestrator's admin
// socket when one answers at path, else nil.
func adminSocketClient(path string) *http.Client {
	if path == "" {
		return nil
	}
	if _, err := os.Stat(path); err != nil {
		return nil
	}
	c, err := net.DialTimeout("unix", path, time.Second)
	if err != nil {
		return nil // a stale socket file: no orchestrator behind it
	}
	c.Close()
	return &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", path)
		},
	}}
}

// adminCall sends one admin API request over the socket and decodes the reply.
func adminCall(ctx context.Context, c *http.Client, method, path string, body, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://localhost"+path, rd)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	res, err := c.Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(res.Body, 1<<20))
	if res.StatusCode >= 300 {
		var e protocol.ErrorBody
		if json.Unmarshal(b, &e) == nil && e.Detail != "" {
			return fmt.Errorf("the orchestrator answered %d: %s", res.StatusCode, e.Detail)
		}
		return fmt.Errorf("the orchestrator answered %d: %s", res.StatusCode, strings.TrimSpace(string(b)))
	}
	if out != nil {
		return json.Unmarshal(b, out)
	}
	return nil
}

func (t tokenArgs) viaAPI(ctx context.Context, c *http.Client, socket string, stdout, stderr io.Writer) error {
	via := "the running orchestrator (admin socket " + socket + ")"
	switch t.verb {
	case "create":
		var r struct {
			ID, Name, Token, Team string
			Scopes                []string
		}
		body := map[string]any{"name": t.name, "scopes": t.scopes, "team": t.team} // the orchestrator checks the team
		if t.maxPriority != nil {
			body["max_priority"] = *t.maxPriority
		}
		if err := adminCall(ctx, c, http.MethodPost, "/api/admin/tokens", body, &r); err != nil {
			return fmt.Errorf("token create: %w", err)
		}
		fmt.Fprintln(stdout, r.Token)
		fmt.Fprintf(stderr, "created admin token %s (%s) with scopes %s in team %s through %s; it is shown only once\n",
			r.ID, r.Name, strings.Join(r.Scopes, ","), teamOrDefault(r.Team), via)
	case "list":
		var r struct {
			Tokens []tokenRow `json:"tokens"`
		}
		if err := adminCall(ctx, c, http.MethodGet, "/api/admin/tokens", nil, &r); err != nil {
			return fmt.Errorf("token list: %w", err)
		}
		fmt.Fprintf(stderr, "admin tokens of %s\n", via)
		return printTokens(stdout, r.Tokens)
	case "revoke":
		if err := adminCall(ctx, c, http.MethodDelete, "/api/admin/tokens/"+t.id, nil, nil); err != nil {
			return fmt.Errorf("token revoke %s: %w", t.id, err)
		}
		fmt.Fprintf(stdout, "revoked %s through %s\n", t.id, via)
	}
	return nil
}
