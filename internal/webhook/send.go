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
	"syscall"
	"time"

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
		// A receiver's answer needs no more than a status line and a few
		// headers: a larger header is refused rather than buffered.
		MaxResponseHeaderBytes: MaxResponseHeader,
	}
	return &http.Client{Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

// MaxResponseHeader bounds the headers of a receiver's answer.
const MaxResponseHeader = 16 << 10

// drainLimit bounds how much of an answer's body is read (and thrown
// away) so that its connection can be used again.
const drainLimit = 64 << 10

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
		ap, err := netip.ParseAddrPort(address)
		if err != nil {
			return fmt.Errorf("connecting to %q: not an IP address and port", address)
		}
		ip := ap.Addr()
		if why := g.RefusesAt(ip, ap.Port()); why != "" {
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
	h.Set(TimestampHeader, strconv.FormatInt(at.Unix(), 10))
	h.Set(SignatureHeader, Sign(d.Webhook.Secret, d.EventID, at, body))
	resp, err := c.Do(req)
	if err != nil {
		return result{err: requestError(ctx, err)}
	}
	defer resp.Body.Close()
	// The answer's body is read only to be thrown away: what a receiver
	// says never reaches the delivery log, which would otherwise read back
	// whatever an internal service at the URL answers.
	n, _ := io.Copy(io.Discard, io.LimitReader(resp.Body, drainLimit+1))
	switch {
	case resp.StatusCode >= 200 && resp.StatusCode < 300:
		return result{ok: true, status: resp.StatusCode}
	case resp.StatusCode >= 300 && resp.StatusCode < 400:
		return result{status: resp.StatusCode, err: fmt.Sprintf("HTTP %d: redirects are not followed", resp.StatusCode)}
	}
	return result{status: resp.StatusCode, err: fmt.Sprintf("HTTP %d, %s", resp.StatusCode, bodyLength(n))}
}

// bodyLength says how long an answer's body was, as far as it was read.
func bodyLength(n int64) string {
	switch {
	case n > drainLimit:
		return fmt.Sprintf("a body of more than %d bytes", drainLimit)
	case n == 1:
		return "a body of 1 byte"
	}
	return fmt.Sprintf("a body of %d bytes", n)
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
