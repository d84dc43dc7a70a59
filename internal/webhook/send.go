package webhook

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/simpletuner/simpletuner-orchestration/internal/store"
	"github.com/simpletuner/simpletuner-orchestration/internal/webhook/spec"
)

// newClient returns the HTTP client requests go out with: no proxy (a proxy
// would connect where the guard cannot look), no redirects, and every
// connection checked against the guard once the name is resolved, so a
// name that resolves to a refused address (DNS rebinding included) is
// refused at connect time.
func newClient(g spec.Guard, timeout time.Duration) *http.Client {
	dialer := &net.Dialer{Timeout: timeout, KeepAlive: 30 * time.Second, Control: guardControl(g)}
	tr := &http.Transport{
		Proxy:                 nil,
		DialContext:           dialer.DialContext,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          64,
		MaxIdleConnsPerHost:   4,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   timeout,
		ResponseHeaderTimeout: timeout,
	}
	return &http.Client{Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

// refusedError is a connection the guard refused.
type refusedError struct {
	ip  netip.Addr
	why string
}

func (e *refusedError) Error() string {
	return fmt.Sprintf("connection to %s refused: it is %s", e.ip, e.why)
}

func guardControl(g spec.Guard) func(network, address string, _ syscall.RawConn) error {
	return func(_, address string, _ syscall.RawConn) error {
		host, _, err := net.SplitHostPort(address)
		if err != nil {
			return err
		}
		ip, err := netip.ParseAddr(host)
		if err != nil {
			return fmt.Errorf("connecting to %q: not an IP address", host)
		}
		if why := g.Refuses(ip); why != "" {
			return &refusedError{ip, why}
		}
		return nil
	}
}

// render makes the body of d in its subscription's format (JSON either way).
func render(d store.WebhookDelivery) ([]byte, error) {
	if d.Webhook.Format != spec.FormatSlack {
		return d.Payload, nil
	}
	var p Payload
	if err := json.Unmarshal(d.Payload, &p); err != nil {
		return nil, fmt.Errorf("the event's payload does not decode: %w", err)
	}
	return json.Marshal(map[string]string{"text": SlackText(p)})
}

// result is how a request went.
type result struct {
	ok     bool
	status int    // the answer's HTTP status; 0 when none came
	err    string // what went wrong, for the delivery log: never the URL
}

// send makes one request of d, signed, and reads the answer.
func send(ctx context.Context, c *http.Client, d store.WebhookDelivery, attempt int, ua string, at time.Time) result {
	body, err := render(d)
	if err != nil {
		return result{err: err.Error()}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, d.Webhook.URL, bytes.NewReader(body))
	if err != nil {
		return result{err: "the URL does not make a request"}
	}
	h := req.Header
	h.Set("Content-Type", "application/json")
	h.Set("User-Agent", ua)
	h.Set(EventHeader, d.EventType)
	h.Set(EventIDHeader, d.EventID)
	h.Set(DeliveryHeader, strconv.FormatInt(d.ID, 10))
	h.Set(AttemptHeader, strconv.Itoa(attempt))
	h.Set(SignatureHeader, Sign(d.Webhook.Secret, at, body))
	resp, err := c.Do(req)
	if err != nil {
		return result{err: requestError(ctx, err)}
	}
	defer resp.Body.Close()
	snippet, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10)) // so the connection can be used again
	switch {
	case resp.StatusCode >= 200 && resp.StatusCode < 300:
		return result{ok: true, status: resp.StatusCode}
	case resp.StatusCode >= 300 && resp.StatusCode < 400:
		return result{status: resp.StatusCode, err: fmt.Sprintf("HTTP %d: redirects are not followed (to %s)", resp.StatusCode,
			spec.Origin(resp.Header.Get("Location")))}
	}
	msg := fmt.Sprintf("HTTP %d", resp.StatusCode)
	if s := printable(snippet); s != "" {
		msg += ": " + s
	}
	return result{status: resp.StatusCode, err: msg}
}

// requestError describes a failed request without its URL, whose path may
// hold a secret (url.Error names it).
func requestError(ctx context.Context, err error) string {
	if ue, ok := errors.AsType[*url.Error](err); ok {
		err = ue.Err
	}
	if re, ok := errors.AsType[*refusedError](err); ok {
		return re.Error()
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return "no answer in time (webhook_delivery.timeout)"
	}
	if errors.Is(err, context.Canceled) {
		return "interrupted: the orchestrator stopped"
	}
	return err.Error()
}

// printable is the start of an answer's body as one line of text.
func printable(b []byte) string {
	s := strings.ToValidUTF8(string(b), "?")
	s = strings.Join(strings.Fields(s), " ")
	if utf8.RuneCountInString(s) > 200 {
		s = string([]rune(s)[:200]) + "…"
	}
	return s
}
