// Package client is simpletunerctl's connection to simpletuner-orchestratord:
// HTTP over TCP (optionally TLS with a client certificate) or over the local
// admin unix socket, an admin token in the Authorization header, and the API's
// {"detail","error"} error bodies turned into *APIError. It speaks only the
// public HTTP API, so it works against any replica.
package client

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
	"time"
)

// DefaultSocket is the orchestrator's admin socket in the packaged units.
const DefaultSocket = "/run/simpletuner/orchestratord.sock"

// DefaultURL is used when the admin socket is absent or unusable.
const DefaultURL = "http://localhost:8001"

// Options say where the orchestrator is and how to prove who we are.
type Options struct {
	// URL is http://host:port, https://host:port, unix:///path/to.sock or an
	// absolute socket path.
	URL   string
	Token string // admin token; never sent over a unix socket (the peer's uid is the credential there)
	// CAFile verifies the server's certificate; CertFile and KeyFile are a
	// client certificate for orchestrators that require mTLS.
	CAFile, CertFile, KeyFile string
	// Timeout bounds each ordinary request; streams (log follow, downloads)
	// have none.
	Timeout   time.Duration
	UserAgent string
}

// Client sends requests to one orchestrator.
type Client struct {
	base      *url.URL // scheme and host requests go to ("http://unix" over a socket)
	display   string   // the endpoint as the user named it, for messages
	socket    string   // socket path, "" over TCP
	token     string
	userAgent string
	timeout   time.Duration
	hc        *http.Client
}

// ParseEndpoint splits a --url value into the base URL to send requests to and
// the unix socket path ("" for TCP).
func ParseEndpoint(raw string) (base *url.URL, socket string, err error) {
	raw = strings.TrimSpace(raw)
	if raw == "" {
		return nil, "", errors.New("the orchestrator URL is empty")
	}
	if strings.HasPrefix(raw, "/") {
		raw = "unix://" + raw
	}
	u, err := url.Parse(raw)
	if err != nil {
		return nil, "", fmt.Errorf("orchestrator URL %q: %v", raw, err)
	}
	switch u.Scheme {
	case "http", "https":
		if u.Host == "" {
			return nil, "", fmt.Errorf("orchestrator URL %q has no host", raw)
		}
		if u.User != nil {
			return nil, "", fmt.Errorf("orchestrator URL %q: put credentials in --token-file, not in the URL", redactUser(u))
		}
		if u.Path != "" && u.Path != "/" || u.RawQuery != "" || u.Fragment != "" {
			return nil, "", fmt.Errorf("orchestrator URL %q must be scheme://host[:port] without a path", raw)
		}
		return &url.URL{Scheme: u.Scheme, Host: u.Host}, "", nil
	case "unix":
		p := u.Path
		if u.Host != "" || !strings.HasPrefix(p, "/") {
			return nil, "", fmt.Errorf("orchestrator URL %q: a socket is written unix:///absolute/path.sock", raw)
		}
		return &url.URL{Scheme: "http", Host: "unix"}, p, nil
	}
	return nil, "", fmt.Errorf("orchestrator URL %q: the scheme must be http, https or unix", raw)
}

func redactUser(u *url.URL) string {
	c := *u
	c.User = url.User("…")
	return c.String()
}

// SocketUsable reports whether a unix socket at path accepts a connection from
// us; "exists" is not enough, as a stale file or missing permission would only
// fail later with a less helpful message.
func SocketUsable(path string) bool {
	fi, err := os.Stat(path)
	if err != nil || fi.Mode()&os.ModeSocket == 0 {
		return false
	}
	c, err := net.DialTimeout("unix", path, time.Second)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

// New checks the options and builds a client. It does not connect.
func New(o Options) (*Client, error) {
	base, socket, err := ParseEndpoint(o.URL)
	if err != nil {
		return nil, err
	}
	if (o.CertFile == "") != (o.KeyFile == "") {
		return nil, errors.New("a client certificate needs both --cert-file and --key-file")
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.Proxy = nil // the orchestrator is reached directly; proxies would see the token
	if socket != "" {
		if o.CAFile != "" || o.CertFile != "" {
			return nil, fmt.Errorf("TLS options (--ca-file, --cert-file) do not apply to the unix socket %s", socket)
		}
		var d net.Dialer
		tr.DialContext = func(ctx context.Context, _, _ string) (net.Conn, error) {
			return d.DialContext(ctx, "unix", socket)
		}
	} else if o.CAFile != "" || o.CertFile != "" {
		if base.Scheme != "https" {
			return nil, fmt.Errorf("TLS options (--ca-file, --cert-file) need an https:// URL, not %s", base)
		}
		tc := &tls.Config{MinVersion: tls.VersionTLS12}
		if o.CAFile != "" {
			pem, err := os.ReadFile(o.CAFile)
			if err != nil {
				return nil, fmt.Errorf("CA file: %w", err)
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				return nil, fmt.Errorf("CA file %s holds no PEM certificate", o.CAFile)
			}
			tc.RootCAs = pool
		}
		if o.CertFile != "" {
			cert, err := tls.LoadX509KeyPair(o.CertFile, o.KeyFile)
			if err != nil {
				return nil, fmt.Errorf("client certificate %s / key %s: %w", o.CertFile, o.KeyFile, err)
			}
			tc.Certificates = []tls.Certificate{cert}
		}
		tr.TLSClientConfig = tc
	}
	display := base.String()
	if socket != "" {
		display = "unix://" + socket
	}
	ua := o.UserAgent
	if ua == "" {
		ua = "simpletunerctl"
	}
	return &Client{base: base, display: display, socket: socket, token: o.Token, userAgent: ua,
		timeout: o.Timeout, hc: &http.Client{Transport: tr}}, nil
}

// Endpoint is the orchestrator as the user named it ("unix:///run/…" or the URL).
func (c *Client) Endpoint() string { return c.display }

// OverSocket reports whether requests go over a unix socket.
func (c *Client) OverSocket() bool { return c.socket != "" }

// HasToken reports whether requests carry an admin token.
func (c *Client) HasToken() bool { return c.token != "" && c.socket == "" }

// APIError is an answer other than 2xx. Detail is the API's own explanation.
type APIError struct {
	Status int
	Code   string // the API's "error" field, e.g. "not_found"
	Detail string
	Method string
	Path   string
}

func (e *APIError) Error() string {
	if e.Detail != "" {
		return e.Detail
	}
	return fmt.Sprintf("%s %s: HTTP %d %s", e.Method, e.Path, e.Status, http.StatusText(e.Status))
}

// IsStatus reports whether err is an APIError with one of the statuses.
func IsStatus(err error, statuses ...int) bool {
	var ae *APIError
	if !errors.As(err, &ae) {
		return false
	}
	for _, s := range statuses {
		if ae.Status == s {
			return true
		}
	}
	return false
}

// ConnError means the orchestrator could not be reached or the connection broke.
type ConnError struct {
	Endpoint string
	Err      error
}

func (e *ConnError) Error() string {
	return fmt.Sprintf("cannot reach the orchestrator at %s: %v", e.Endpoint, conciseNetErr(e.Err))
}

func (e *ConnError) Unwrap() error { return e.Err }

// conciseNetErr drops the "Get \"http://…\":" prefix url.Error adds: the
// endpoint is already named, and the request line only adds noise.
func conciseNetErr(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// Request is one API call.
type Request struct {
	Method string
	Path   string // "/api/queue"; already escaped where it holds ids
	Query  url.Values
	Body   any         // marshalled as JSON when not nil
	Header http.Header // extra headers (Range, Last-Event-ID)
}

func (c *Client) newRequest(ctx context.Context, r Request) (*http.Request, error) {
	target := c.base.String() + r.Path
	if len(r.Query) > 0 {
		sep := "?"
		if strings.Contains(r.Path, "?") {
			sep = "&"
		}
		target += sep + r.Query.Encode()
	}
	var body io.Reader
	if r.Body != nil {
		b, err := json.Marshal(r.Body)
		if err != nil {
			return nil, err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, r.Method, target, body)
	if err != nil {
		return nil, err
	}
	if r.Body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", c.userAgent)
	if c.HasToken() {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	for k, vs := range r.Header {
		for _, v := range vs {
			req.Header.Add(k, v)
		}
	}
	return req, nil
}

// maxReply bounds an ordinary JSON reply; lists are paged well below it.
const maxReply = 64 << 20

// Do sends r and returns the reply body of a 2xx answer. Other answers become
// *APIError, transport failures *ConnError.
func (c *Client) Do(ctx context.Context, r Request) ([]byte, error) {
	if c.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.timeout)
		defer cancel()
	}
	res, err := c.Open(ctx, r)
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(io.LimitReader(res.Body, maxReply+1))
	if err != nil {
		return nil, &ConnError{Endpoint: c.display, Err: err}
	}
	if len(b) > maxReply {
		return nil, fmt.Errorf("%s %s: the reply is larger than %d bytes", r.Method, r.Path, maxReply)
	}
	return b, nil
}

// GetJSON fetches path and decodes the reply into out; it also returns the
// raw reply, which -o json prints unchanged.
func (c *Client) GetJSON(ctx context.Context, path string, q url.Values, out any) ([]byte, error) {
	return c.JSON(ctx, Request{Method: http.MethodGet, Path: path, Query: q}, out)
}

// JSON sends r and decodes a 2xx reply into out (when not nil).
func (c *Client) JSON(ctx context.Context, r Request, out any) ([]byte, error) {
	b, err := c.Do(ctx, r)
	if err != nil {
		return nil, err
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			return b, fmt.Errorf("%s %s: the orchestrator's reply is not the JSON expected: %v", r.Method, r.Path, err)
		}
	}
	return b, nil
}

// Open sends r and returns the response of a 2xx (or 206) answer with its body
// unread, for streams and downloads; the caller closes it.
func (c *Client) Open(ctx context.Context, r Request) (*http.Response, error) {
	res, err := c.Send(ctx, r)
	if err != nil {
		return nil, err
	}
	if res.StatusCode >= 200 && res.StatusCode < 300 {
		return res, nil
	}
	defer res.Body.Close()
	return nil, ErrorFrom(r, res)
}

// Send sends r and returns the response whatever its status, for callers that
// read headers of error answers too (416 on a download); the caller closes it.
func (c *Client) Send(ctx context.Context, r Request) (*http.Response, error) {
	req, err := c.newRequest(ctx, r)
	if err != nil {
		return nil, err
	}
	res, err := c.hc.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, &ConnError{Endpoint: c.display, Err: err}
	}
	return res, nil
}

// ErrorFrom turns a non-2xx response into an *APIError; it reads the body.
func ErrorFrom(r Request, res *http.Response) error { return decodeError(r, res) }

// decodeError reads the API's error body; a reply that is not one (a proxy's
// HTML page) still yields the status.
func decodeError(r Request, res *http.Response) error {
	b, _ := io.ReadAll(io.LimitReader(res.Body, 64<<10))
	ae := &APIError{Status: res.StatusCode, Method: r.Method, Path: r.Path}
	var body struct {
		Detail json.RawMessage `json:"detail"`
		Error  string          `json:"error"`
	}
	if json.Unmarshal(b, &body) == nil {
		ae.Code = body.Error
		ae.Detail = detailText(body.Detail)
	}
	ae.Detail = oneLine(ae.Detail)
	return ae
}

// detailText accepts the documented string detail and, from upstream-style
// servers, an object or list (validation errors), shown as compact JSON.
func detailText(raw json.RawMessage) string {
	if len(raw) == 0 || string(raw) == "null" {
		return ""
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var buf bytes.Buffer
	if json.Compact(&buf, raw) == nil {
		return buf.String()
	}
	return string(raw)
}

// oneLine folds a message onto one line so that scripts can read errors line by line.
func oneLine(s string) string {
	s = strings.TrimSpace(s)
	if !strings.ContainsAny(s, "\r\n") {
		return s
	}
	return strings.Join(strings.Fields(s), " ")
}

// PathEscape escapes one path segment (an id or a name) for Request.Path.
func PathEscape(s string) string { return url.PathEscape(s) }
