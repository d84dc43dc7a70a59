package worker

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/config"
	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
)

// client talks to the orchestrator's worker API: at one URL, or at one of
// several (replicas on one database) that it tries in turn.
type client struct {
	urls    []string // as configured
	bases   []string // per URL: "https://host:8001", or "http://unix" for a unix socket
	cur     atomic.Int32
	tok     tokenHolder
	http    *http.Client // no overall timeout: each call sets its own, the stream none
	hasCert bool         // a client certificate is configured
	// session is the installation id sent with every request (set by Start).
	session atomic.Pointer[string]
}

// base is the URL requests go to now.
func (c *client) base() string { return c.bases[c.cur.Load()] }

// currentURL is the configured URL requests go to now.
func (c *client) currentURL() string { return c.urls[c.cur.Load()] }

// failover moves on to the next configured URL after a connection to the
// current one failed; it returns the new URL, or "" when there is no other.
// Going round the list in order keeps every worker on the first replica
// while it answers.
func (c *client) failover(from string) string {
	if len(c.urls) < 2 {
		return ""
	}
	for {
		cur := c.cur.Load()
		if c.urls[cur] != from {
			return c.urls[cur] // someone else moved on already
		}
		next := (cur + 1) % int32(len(c.urls))
		if c.cur.CompareAndSwap(cur, next) {
			return c.urls[next]
		}
	}
}

// tlsFiles are the worker's TLS settings.
type tlsFiles struct {
	CAFile             string // trust these CAs for the orchestrator's certificate ("" system)
	CertFile, KeyFile  string // client certificate for mutual TLS ("" none)
	InsecureSkipVerify bool
}

// newClient builds a client for rawURL: http(s)://host[:port][/prefix],
// several of those separated by commas (tried in turn), or
// unix:///path/to.sock alone (dialled directly, requests go to http://unix).
func newClient(rawURL, token string, tf tlsFiles) (*client, error) {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.ResponseHeaderTimeout = 0
	urls := config.OrchestratorURLs(rawURL)
	if len(urls) == 0 {
		return nil, errors.New("orchestrator url is not set")
	}
	var bases []string
	for _, one := range urls {
		u, err := url.Parse(one)
		if err != nil {
			return nil, fmt.Errorf("orchestrator url %q: %w", one, err)
		}
		base := strings.TrimRight(u.String(), "/")
		switch u.Scheme {
		case "http", "https":
			if u.Host == "" {
				return nil, fmt.Errorf("orchestrator url %q has no host", one)
			}
		case "unix":
			path := u.Path
			if path == "" {
				return nil, fmt.Errorf("orchestrator url %q names no socket path", one)
			}
			if len(urls) > 1 {
				return nil, fmt.Errorf("orchestrator url %q: a unix socket cannot be one of several URLs", one)
			}
			var d net.Dialer
			tr.DialContext = func(ctx context.Context, _, _ string) (net.Conn, error) {
				return d.DialContext(ctx, "unix", path)
			}
			tr.Proxy = nil
			base = "http://unix"
		default:
			return nil, fmt.Errorf("orchestrator url %q: scheme must be http, https or unix", one)
		}
		bases = append(bases, base)
	}
	if tf.CAFile != "" || tf.InsecureSkipVerify || tf.CertFile != "" {
		tc := &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: tf.InsecureSkipVerify} //nolint:gosec // opt-in, warned about at every start
		if tf.CAFile != "" {
			pem, err := os.ReadFile(tf.CAFile)
			if err != nil {
				return nil, fmt.Errorf("orchestrator ca_file: %w", err)
			}
			pool, err := x509.SystemCertPool()
			if err != nil || pool == nil {
				pool = x509.NewCertPool()
			}
			if !pool.AppendCertsFromPEM(pem) {
				return nil, fmt.Errorf("orchestrator ca_file %s: no PEM certificates found", tf.CAFile)
			}
			tc.RootCAs = pool
		}
		if tf.CertFile != "" || tf.KeyFile != "" {
			cert, err := tls.LoadX509KeyPair(tf.CertFile, tf.KeyFile)
			if err != nil {
				return nil, fmt.Errorf("orchestrator cert_file %s / key_file %s: %w", tf.CertFile, tf.KeyFile, err)
			}
			tc.Certificates = []tls.Certificate{cert}
		}
		tr.TLSClientConfig = tc
	}
	c := &client{urls: urls, bases: bases, hasCert: tf.CertFile != ""}
	c.tok.set(token)
	c.http = &http.Client{Transport: tr, CheckRedirect: c.checkRedirect}
	return c, nil
}

// ErrRedirected is returned by Serve when the orchestrator URL redirects to
// another origin: the worker token is never sent there, and retrying cannot
// change where the URL points.
var ErrRedirected = errors.New("the orchestrator URL redirects to another origin")

// checkRedirect follows a redirect only within the origin (scheme, host and
// port) the request was sent to. The worker token rides in a header the
// HTTP client would copy to any host a 3xx names, and a redirect from https
// to http would send it in the clear: neither is allowed.
func (c *client) checkRedirect(req *http.Request, via []*http.Request) error {
	from := via[len(via)-1].URL
	if origin(req.URL) != origin(from) {
		return fmt.Errorf("%w: %s answered with a redirect to %s; the worker token is not sent there. "+
			"Set [orchestrator] url to the address that answers itself", ErrRedirected, from.Redacted(), req.URL.Redacted())
	}
	if len(via) >= 5 {
		return errors.New("stopped after 5 redirects")
	}
	return nil
}

// origin is scheme://host:port with the scheme's default port spelled out.
func origin(u *url.URL) string {
	port := u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[u.Scheme]
	}
	return strings.ToLower(u.Scheme) + "://" + strings.ToLower(u.Hostname()) + ":" + port
}

// ErrClientCertificate is returned by Serve when the orchestrator demands a
// client certificate the worker does not have, or refuses the one it has.
// Retrying cannot help; the worker's TLS settings must change.
var ErrClientCertificate = errors.New("the orchestrator refused the TLS connection over the client certificate")

// certificateRefusal explains a TLS alert about the worker's client
// certificate, or returns nil. The alerts reach the client only as text
// ("remote error: tls: …"), so that is what is matched.
func (c *client) certificateRefusal(err error) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	var alert string
	for _, a := range []string{"certificate required", "unknown certificate authority", "bad certificate",
		"expired certificate", "revoked certificate", "unsupported certificate", "certificate unknown"} {
		if strings.Contains(msg, "remote error: tls: "+a) {
			alert = a
			break
		}
	}
	switch {
	case alert == "":
		return nil
	case !c.hasCert:
		return fmt.Errorf("%w: the orchestrator requires a client certificate (TLS alert %q) and none is configured; "+
			"set [orchestrator] cert_file and key_file, or the systemd credentials worker-cert and worker-key", ErrClientCertificate, alert)
	default:
		return fmt.Errorf("%w: the orchestrator refused this worker's client certificate (TLS alert %q); "+
			"it must be valid and signed by a CA in the orchestrator's tls.client_ca_file", ErrClientCertificate, alert)
	}
}

// ErrRegistrationRefused is returned by Serve when the orchestrator found the
// registration itself invalid (HTTP 422: labels over its limits, say); the
// same request would be refused again.
var ErrRegistrationRefused = errors.New("the orchestrator refused the registration as invalid")

// unfixable returns the configuration error a failed registration shows, or
// nil when waiting and retrying may help: the URL is not an orchestrator's,
// redirects to another origin, the client certificate is missing or
// refused, or the registration itself is invalid.
func (c *client) unfixable(err error) error {
	if errors.Is(err, ErrRedirected) {
		return err
	}
	if statusOf(err) == http.StatusUnprocessableEntity {
		return fmt.Errorf("%w: %v; fix the worker's configuration", ErrRegistrationRefused, err)
	}
	if e := c.certificateRefusal(err); e != nil {
		return e
	}
	if e := c.schemeMismatch(err); e != nil {
		return e
	}
	return c.notAnOrchestrator(err)
}

// ErrWrongScheme is returned by Serve when the orchestrator URL's scheme does
// not match what answers there: https:// to a plain-HTTP listener, or http://
// to a TLS one. Retrying cannot help; the URL (or the orchestrator's [tls])
// must change.
var ErrWrongScheme = errors.New("the orchestrator URL's scheme does not match the orchestrator's listener")

// schemeMismatch explains a registration that failed because one side
// speaks TLS and the other does not, or returns nil.
func (c *client) schemeMismatch(err error) error {
	var he *httpError
	switch {
	case err == nil:
		return nil
	case strings.Contains(err.Error(), "server gave HTTP response to HTTPS client"):
		return fmt.Errorf("%w: %s answers plain HTTP, not HTTPS; use http:// in [orchestrator] url, or turn TLS on in the "+
			"orchestrator ([tls] cert_file and key_file)", ErrWrongScheme, c.currentURL())
	case errors.As(err, &he) && he.Status == http.StatusBadRequest && (strings.Contains(he.Body.Detail, "HTTP request to an HTTPS server") ||
		strings.Contains(he.Body.Detail, "plain HTTP request was sent to HTTPS port")): // Go's TLS listener, nginx
		return fmt.Errorf("%w: %s is served over TLS; use https:// in [orchestrator] url", ErrWrongScheme, c.currentURL())
	}
	return nil
}

// tokenHint is what may be logged about a token: its first 8 characters.
func tokenHint(tok string) string {
	if len(tok) > 8 {
		return tok[:8] + "…"
	}
	return "(short token)"
}

// httpError is a non-2xx answer from the orchestrator.
type httpError struct {
	Status int
	Body   protocol.ErrorBody
	Op     string
	// token is the worker token the request carried (never printed): a 401
	// for a token already replaced says nothing about the current one.
	token string
}

func (e *httpError) Error() string {
	msg := e.Body.Detail
	if msg == "" {
		msg = http.StatusText(e.Status)
	}
	if e.Body.Error != "" {
		msg += " (" + e.Body.Error + ")"
	}
	return fmt.Sprintf("%s: HTTP %d: %s", e.Op, e.Status, msg)
}

// statusOf returns the HTTP status of err, or 0 for a transport error.
func statusOf(err error) int {
	var he *httpError
	if errors.As(err, &he) {
		return he.Status
	}
	return 0
}

// ErrAuthRejected is returned by Serve when the orchestrator answered 401 to the
// worker's token. Retrying cannot help; an admin must install a new token.
var ErrAuthRejected = errors.New("the orchestrator rejected the worker token (401): it was rotated or revoked; install a new one")

func isAuthError(err error) bool { return statusOf(err) == http.StatusUnauthorized }

// refusedToken is the token a 401 refused ("" when err is no 401).
func refusedToken(err error) string {
	var he *httpError
	if errors.As(err, &he) && he.Status == http.StatusUnauthorized {
		return he.token
	}
	return ""
}

// isSessionRefused reports the orchestrator's answer to a workerd whose token
// another live workerd installation is using.
func isSessionRefused(err error) bool {
	var he *httpError
	return errors.As(err, &he) && he.Status == http.StatusConflict && he.Body.Error == protocol.CodeSessionActive
}

// ErrNotAnOrchestrator is returned by Serve when the configured URL answers,
// but not as an orchestrator would: retrying cannot help, the URL is wrong.
var ErrNotAnOrchestrator = errors.New("the orchestrator URL does not point at simpletuner-orchestratord")

// notAnOrchestrator explains a registration answer that shows the URL is not
// an orchestrator's (404 or 405 on the register endpoint), or returns nil.
func (c *client) notAnOrchestrator(err error) error {
	switch statusOf(err) {
	case http.StatusNotFound, http.StatusMethodNotAllowed:
	default:
		return nil
	}
	hint := "set [orchestrator] url to the orchestrator's base URL, e.g. http://orchestrator.example:8001"
	if u, err := url.Parse(c.base()); err == nil && u.Path != "" {
		hint = fmt.Sprintf("remove the path %q from [orchestrator] url: the worker adds /api/... itself", u.Path)
	}
	return fmt.Errorf("%w: POST %s answered %v; %s", ErrNotAnOrchestrator, c.resolve("/api/workers/register"), err, hint)
}

// request builds a request carrying the worker token; path is an API path or an
// endpoint the orchestrator gave.
func (c *client) request(ctx context.Context, method, path string, body io.Reader) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, method, c.resolve(path), body)
	if err != nil {
		return nil, err
	}
	req.Header.Set("X-Worker-Token", c.tok.get())
	if sess := c.session.Load(); sess != nil {
		req.Header.Set(protocol.HeaderWorkerSession, *sess)
	}
	req.Header.Set("User-Agent", "simpletuner-workerd")
	return req, nil
}

// doJSON sends in (if not nil) as JSON and decodes a 2xx answer into out (if not
// nil) within timeout. A non-2xx answer is an *httpError.
func (c *client) doJSON(ctx context.Context, timeout time.Duration, op, method, path string, in, out any) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	req, err := c.request(ctx, method, path, body)
	if err != nil {
		return err
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	defer resp.Body.Close()
	return c.noteRefusal(decodeResponse(resp, op, out))
}

// noteRefusal marks the token a 401 refused, so that the senders that wait
// for a usable token stop at once; it returns err.
func (c *client) noteRefusal(err error) error {
	if tok := refusedToken(err); tok != "" {
		c.tok.refuse(tok)
	}
	return err
}

// decodeResponse turns a response into out or an *httpError, draining the body so
// the connection is reused.
func decodeResponse(resp *http.Response, op string, out any) error {
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return fmt.Errorf("%s: reading response: %w", op, err)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		he := &httpError{Status: resp.StatusCode, Op: op}
		if resp.Request != nil {
			he.token = resp.Request.Header.Get("X-Worker-Token")
		}
		if json.Unmarshal(raw, &he.Body) != nil {
			he.Body.Detail = strings.TrimSpace(string(raw))
			if len(he.Body.Detail) > 200 {
				he.Body.Detail = he.Body.Detail[:200] + "…"
			}
		}
		return he
	}
	if out == nil || len(bytes.TrimSpace(raw)) == 0 {
		return nil
	}
	if err := json.Unmarshal(raw, out); err != nil {
		return fmt.Errorf("%s: decoding response: %w", op, err)
	}
	return nil
}

// absURL resolves an endpoint the orchestrator gave (often relative) against the
// configured orchestrator URL, for what the job sees.
func absURL(orchestratorURL, endpoint string) string {
	if endpoint == "" || strings.Contains(endpoint, "://") {
		return endpoint
	}
	return strings.TrimRight(orchestratorURL, "/") + "/" + strings.TrimLeft(endpoint, "/")
}

// resolve turns a path, or an endpoint the orchestrator gave (relative, or an
// absolute URL), into a URL for this client. Over a unix socket only the path of an
// absolute URL is used.
func (c *client) resolve(endpoint string) string {
	base := c.base()
	if u, err := url.Parse(endpoint); err == nil && u.IsAbs() {
		if base != "http://unix" {
			return endpoint
		}
		endpoint = u.RequestURI()
	}
	if !strings.HasPrefix(endpoint, "/") {
		endpoint = "/" + endpoint
	}
	return base + endpoint
}
