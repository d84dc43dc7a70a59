// Package orchclient is workerd's one HTTP client for the worker protocol:
// registration, the stream, heartbeats, reports, the job's log and the
// checkpoint keeper's uploads and downloads all go through a Client. It
// knows the orchestrator's URLs (one, or several replicas tried in turn),
// the TLS settings, and how a request proves who sends it: the worker token
// and session, or, through a view from WithUploadToken, one attempt's
// upload token. A non-2xx answer is an *Error.
package orchclient

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

// Headers that carry the credentials.
const (
	HeaderWorkerToken = "X-Worker-Token"
	HeaderUploadToken = "X-Upload-Token"
)

// maxAnswer bounds what is read of an answer: a checkpoint list names every
// file of every kept checkpoint.
const maxAnswer = 64 << 20

// Client talks to the orchestrator's worker API. Views made by
// WithUploadToken share its URLs, its connections and the URL in use.
type Client struct {
	*shared
	// upload is the attempt's upload token a view sends instead of the
	// worker's credentials; "" sends the worker token and session.
	upload string
}

// shared is what a Client and its views have in common.
type shared struct {
	urls    []string // as configured
	bases   []string // per URL: "https://host:8001", or "http://unix" for a unix socket
	cur     atomic.Int32
	tok     Token
	http    *http.Client // no overall timeout: each call sets its own, the stream none
	hasCert bool         // a client certificate is configured
	// session is the installation id sent with the worker's requests.
	session atomic.Pointer[string]
}

// TLS are the worker's TLS settings.
type TLS struct {
	CAFile             string // trust these CAs for the orchestrator's certificate ("" system)
	CertFile, KeyFile  string // client certificate for mutual TLS ("" none)
	InsecureSkipVerify bool
}

// New builds a client for rawURL: http(s)://host[:port][/prefix], several of
// those separated by commas (tried in turn), or unix:///path/to.sock alone
// (dialled directly, requests go to http://unix).
func New(rawURL, token string, tf TLS) (*Client, error) {
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
	s := &shared{urls: urls, bases: bases, hasCert: tf.CertFile != ""}
	s.tok.Set(token)
	s.http = &http.Client{Transport: tr, CheckRedirect: checkRedirect}
	return &Client{shared: s}, nil
}

// WithUploadToken is a view of c whose requests carry an attempt's upload
// token, and neither the worker token nor its session: what the checkpoint
// keeper sends is the attempt's to authorise.
func (c *Client) WithUploadToken(token string) *Client {
	return &Client{shared: c.shared, upload: token}
}

// Token is the worker token in force.
func (c *Client) Token() *Token { return &c.tok }

// SetSession sets the installation id sent with the worker's requests.
func (c *Client) SetSession(id string) { c.session.Store(&id) }

// HasCert reports whether a client certificate is configured.
func (c *Client) HasCert() bool { return c.hasCert }

// Base is the URL requests go to now.
func (c *Client) Base() string { return c.bases[c.cur.Load()] }

// CurrentURL is the configured URL requests go to now.
func (c *Client) CurrentURL() string { return c.urls[c.cur.Load()] }

// Failover moves on to the next configured URL after a connection to the
// current one failed; it returns the new URL, or "" when there is no other.
// Going round the list in order keeps every worker on the first replica
// while it answers.
func (c *Client) Failover(from string) string {
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

// ErrRedirected is returned when the orchestrator URL redirects to another
// origin: the worker token is never sent there, and retrying cannot change
// where the URL points.
var ErrRedirected = errors.New("the orchestrator URL redirects to another origin")

// checkRedirect follows a redirect only within the origin (scheme, host and
// port) the request was sent to. The tokens ride in headers the HTTP client
// would copy to any host a 3xx names, and a redirect from https to http
// would send them in the clear: neither is allowed.
func checkRedirect(req *http.Request, via []*http.Request) error {
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

// Resolve turns a path, or an endpoint the orchestrator gave (relative, or
// an absolute URL), into a URL for this client. Over a unix socket only the
// path of an absolute URL is used.
func (c *Client) Resolve(endpoint string) string {
	base := c.Base()
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

// Request builds a request with the client's credentials; endpoint is an
// API path or an endpoint the orchestrator gave.
func (c *Client) Request(ctx context.Context, method, endpoint string, body io.Reader) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, method, c.Resolve(endpoint), body)
	if err != nil {
		return nil, err
	}
	if c.upload != "" {
		req.Header.Set(HeaderUploadToken, c.upload)
	} else {
		req.Header.Set(HeaderWorkerToken, c.tok.Get())
		if sess := c.session.Load(); sess != nil {
			req.Header.Set(protocol.HeaderWorkerSession, *sess)
		}
	}
	req.Header.Set("User-Agent", "simpletuner-workerd")
	return req, nil
}

// Do sends a request made by Request. The caller reads and closes the
// answer; Check turns an unexpected one into an *Error.
func (c *Client) Do(req *http.Request) (*http.Response, error) { return c.http.Do(req) }

// Call is one JSON request of the protocol.
type Call struct {
	Op     string // names the request in errors: "heartbeat", "commit checkpoint-100"
	Method string
	Path   string // an API path or an endpoint the orchestrator gave
	In     any    // sent as JSON; nil: no body
	Out    any    // a successful answer is decoded into it; nil: dropped
	// Timeout bounds the whole exchange.
	Timeout time.Duration
	// Want is the one status that succeeds; 0 takes any 2xx.
	Want int
}

// Call sends call and decodes its answer. An answer other than the one it
// wants is an *Error; a 401 to the worker token marks that token refused
// (see Token.Refuse).
func (c *Client) Call(ctx context.Context, call Call) error {
	ctx, cancel := context.WithTimeout(ctx, call.Timeout)
	defer cancel()
	var body io.Reader
	if call.In != nil {
		b, err := json.Marshal(call.In)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	req, err := c.Request(ctx, call.Method, call.Path, body)
	if err != nil {
		return err
	}
	if call.In != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		return fmt.Errorf("%s: %w", call.Op, err)
	}
	defer resp.Body.Close()
	if err := c.Check(resp, call.Op, call.Want); err != nil {
		return err
	}
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
	if err != nil {
		return fmt.Errorf("%s: reading response: %w", call.Op, err)
	}
	if call.Out == nil || len(bytes.TrimSpace(raw)) == 0 {
		return nil
	}
	if err := json.Unmarshal(raw, call.Out); err != nil {
		return fmt.Errorf("%s: decoding response: %w", call.Op, err)
	}
	return nil
}

// DoJSON is Call for the worker's own requests: any 2xx succeeds.
func (c *Client) DoJSON(ctx context.Context, timeout time.Duration, op, method, path string, in, out any) error {
	return c.Call(ctx, Call{Op: op, Method: method, Path: path, In: in, Out: out, Timeout: timeout})
}

// Check returns nil for the answer wanted (want 0: any 2xx), else an *Error
// read from (a bounded part of) its body, which it then drains and closes.
// A 401 to the worker token marks that token refused, so that the senders
// that wait for a usable token stop at once.
func (c *Client) Check(resp *http.Response, op string, want int) error {
	if want == 0 && resp.StatusCode >= 200 && resp.StatusCode <= 299 || resp.StatusCode == want {
		return nil
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxAnswer)) // the connection is reused
	e := &Error{Status: resp.StatusCode, Op: op}
	if resp.Request != nil {
		e.token = resp.Request.Header.Get(HeaderWorkerToken)
	}
	if json.Unmarshal(raw, &e.Body) != nil {
		e.Body.Detail = strings.TrimSpace(string(raw))
		if len(e.Body.Detail) > 200 {
			e.Body.Detail = e.Body.Detail[:200] + "…"
		}
	}
	if e.Status == http.StatusUnauthorized && e.token != "" {
		c.tok.Refuse(e.token)
	}
	return e
}

// Error is an answer from the orchestrator other than the one wanted.
type Error struct {
	Status int
	Body   protocol.ErrorBody
	Op     string
	// token is the worker token the request carried (never printed): a 401
	// for a token already replaced says nothing about the current one.
	token string
}

func (e *Error) Error() string {
	msg := e.Body.Detail
	if msg == "" {
		msg = http.StatusText(e.Status)
	}
	if e.Body.Error != "" {
		msg += " (" + e.Body.Error + ")"
	}
	return fmt.Sprintf("%s: HTTP %d: %s", e.Op, e.Status, msg)
}

// StatusOf returns the HTTP status of err, or 0 for a transport error.
func StatusOf(err error) int {
	var e *Error
	if errors.As(err, &e) {
		return e.Status
	}
	return 0
}

// CodeOf returns the error code of the answer err is ("" none).
func CodeOf(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Body.Error
	}
	return ""
}

// RefusedToken is the worker token a 401 refused ("" when err is no 401).
func RefusedToken(err error) string {
	var e *Error
	if errors.As(err, &e) && e.Status == http.StatusUnauthorized {
		return e.token
	}
	return ""
}
