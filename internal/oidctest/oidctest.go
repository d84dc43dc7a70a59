// Package oidctest runs a real OpenID Provider for tests, on a loopback
// HTTP server: discovery, JWKS, the authorization code flow with PKCE and
// the device flow, from github.com/zitadel/oidc's op package over an
// in-memory store. A test signs people in over HTTP (SignIn, Deny,
// ApproveDevice) or, through the same pages, with a browser: the login
// form has the fields #username and #password and the buttons #submit
// and #deny.
//
// The provider can be made to misbehave: rotate its signing key, sign
// with a key it does not publish, issue them to another client, put another nonce in its ID
// tokens, issue them already expired, or answer nothing but 503.
//
// Only tests may import this package; the daemons must not link it.
package oidctest

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"html/template"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/zitadel/oidc/v3/pkg/oidc"
	"github.com/zitadel/oidc/v3/pkg/op"
)

// A User can sign in with Username and Password.
type User struct {
	Subject  string
	Username string
	Password string
	Email    string
	Name     string
	Groups   []string
	// GroupString sends the first group as a single string rather than a list,
	// as some providers do for one group.
	GroupString bool
}

// A Client is an application registered with the provider.
type Client struct {
	ID           string
	Secret       string // none for a public client
	RedirectURIs []string
	Public       bool // a native application without a secret (simpletunerctl)
	Device       bool // may use the device flow
	// Refresh: sign-ins asking for offline_access get a refresh token,
	// which gives new tokens (a new ID token among them) once.
	Refresh bool
}

// Defaults a test can sign in with.
const (
	ClientID     = "orchestrator"
	ClientSecret = "orchestrator-secret"
	CLIClientID  = "simpletunerctl"
	RedirectURI  = "http://127.0.0.1:1/ui/auth/oidc/callback"
)

// Alice is the user Start registers when none is given.
var Alice = User{Subject: "u-alice-0001", Username: "alice", Password: "alice-password",
	Email: "alice@example.com", Name: "Alice Liddell", Groups: []string{"ml-team", "gpu-admins"}}

// Options shape the provider; zero values get the defaults above.
type Options struct {
	Clients []Client
	Users   []User
}

// Server is a running provider.
type Server struct {
	URL string // the issuer

	st       *storage
	provider *op.Provider
	srv      *httptest.Server
	down     atomic.Bool
	keysDown atomic.Bool
}

// Start runs a provider until the test ends.
func Start(t testing.TB, opts ...Options) *Server {
	t.Helper()
	var o Options
	if len(opts) > 0 {
		o = opts[0]
	}
	if o.Clients == nil {
		o.Clients = []Client{
			{ID: ClientID, Secret: ClientSecret, RedirectURIs: []string{RedirectURI}},
			{ID: CLIClientID, Public: true, Device: true, RedirectURIs: []string{"http://127.0.0.1/callback"}},
		}
	}
	if o.Users == nil {
		o.Users = []User{Alice}
	}
	s, err := start(o)
	if err != nil {
		t.Fatalf("oidctest: %v", err)
	}
	t.Cleanup(s.srv.Close)
	return s
}

func start(o Options) (*Server, error) {
	st, err := newStorage(o.Clients, o.Users)
	if err != nil {
		return nil, err
	}
	s := &Server{st: st, srv: httptest.NewUnstartedServer(nil)}
	s.URL = "http://" + s.srv.Listener.Addr().String()
	cfg := &op.Config{
		CryptoKey:      sha256.Sum256([]byte(s.URL)),
		CodeMethodS256: true,
		AuthMethodPost: true,
		// Only clients registered with Refresh get refresh tokens.
		GrantTypeRefreshToken: true,
		DeviceAuthorization: op.DeviceAuthorizationConfig{
			Lifetime: 5 * time.Minute, PollInterval: time.Second, UserFormPath: "/device", UserCode: op.UserCodeBase20,
		},
	}
	s.provider, err = op.NewProvider(cfg, st, op.StaticIssuer(s.URL), op.WithAllowInsecure())
	if err != nil {
		return nil, err
	}
	issuer := op.NewIssuerInterceptor(s.provider.IssuerFromRequest)
	mux := http.NewServeMux()
	mux.HandleFunc("/login", issuer.HandlerFunc(s.login))
	mux.HandleFunc("/device", issuer.HandlerFunc(s.device))
	mux.Handle("/", s.provider)
	s.srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.down.Load() || s.keysDown.Load() && r.URL.Path == "/keys" {
			http.Error(w, "down for the test", http.StatusServiceUnavailable)
			return
		}
		mux.ServeHTTP(w, r)
	})
	s.srv.Start()
	return s, nil
}

// AllowRedirect registers one more redirect URI for clientID: for a client
// whose address is known only once the provider runs (an orchestrator
// configured with this provider's issuer).
func (s *Server) AllowRedirect(clientID, uri string) {
	s.st.mu.Lock()
	defer s.st.mu.Unlock()
	c, ok := s.st.clients[clientID]
	if !ok {
		panic("oidctest: no client " + clientID)
	}
	updated := c.Client
	updated.RedirectURIs = append(append([]string(nil), updated.RedirectURIs...), uri)
	s.st.clients[clientID] = &client{Client: updated, s: s.st}
}

// SetDown makes every request answer 503 (true) or be served again (false).
func (s *Server) SetDown(down bool) { s.down.Store(down) }

// SetKeysDown makes the JWKS (/keys) alone answer 503 (true) or be
// served again (false).
func (s *Server) SetKeysDown(down bool) { s.keysDown.Store(down) }

// Rotate signs new tokens with a new key; the old one stays published.
func (s *Server) Rotate() error { return s.st.rotate() }

// SignWithUnpublishedKey signs new tokens with a key the JWKS never lists
// (on) or with the published key again (off).
func (s *Server) SignWithUnpublishedKey(on bool) error {
	var k *signingKey
	if on {
		var err error
		if k, err = newSigningKey(); err != nil {
			return err
		}
	}
	s.st.mu.Lock()
	defer s.st.mu.Unlock()
	s.st.forge = k
	return nil
}

// IssueAs makes the provider issue clientID's tokens, for sign-ins begun
// from now on, to another client id (audience and azp), as a provider
// mixing up its clients would; as "" restores the right one.
func (s *Server) IssueAs(clientID, as string) {
	s.st.mu.Lock()
	defer s.st.mu.Unlock()
	s.st.issueFor, s.st.issueAs = clientID, as
}

// SetNonce puts nonce in the ID tokens of sign-ins begun from now on
// instead of the one asked for; nil restores the right one.
func (s *Server) SetNonce(nonce *string) {
	s.st.mu.Lock()
	defer s.st.mu.Unlock()
	s.st.nonce = nonce
}

// SetIDTokenLifetime sets how long ID tokens live from when they are
// issued; a negative lifetime issues them already expired.
func (s *Server) SetIDTokenLifetime(d time.Duration) {
	s.st.mu.Lock()
	defer s.st.mu.Unlock()
	s.st.lifetime = d
}

var loginPage = template.Must(template.New("login").Parse(`<!doctype html>
<title>Test provider: sign in</title>
<h1>Sign in</h1>
{{if .Error}}<p id="error">{{.Error}}</p>{{end}}
<form method="post" action="/login">
<input type="hidden" name="id" value="{{.ID}}">
<label>User name <input id="username" name="username" autocomplete="username"></label>
<label>Password <input id="password" name="password" type="password" autocomplete="current-password"></label>
<button id="submit" name="action" value="login">Sign in</button>
<button id="deny" name="action" value="deny">Deny</button>
</form>
`))

// login shows the form (GET) or checks it (POST): then the browser goes
// back to the provider's authorize callback, or to the client with
// error=access_denied when the person denied.
func (s *Server) login(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	id := r.FormValue("id")
	if r.Method != http.MethodPost {
		_ = loginPage.Execute(w, map[string]string{"ID": id})
		return
	}
	if r.FormValue("action") == "deny" {
		req, ok := s.st.request(id)
		if !ok {
			http.Error(w, "unknown sign-in request", http.StatusBadRequest)
			return
		}
		op.AuthRequestError(w, r, req, oidc.ErrAccessDenied().WithDescription("the person declined to sign in"), s.provider)
		return
	}
	if err := s.st.checkLogin(id, r.FormValue("username"), r.FormValue("password")); err != nil {
		w.WriteHeader(http.StatusUnauthorized)
		_ = loginPage.Execute(w, map[string]string{"ID": id, "Error": err.Error()})
		return
	}
	http.Redirect(w, r, op.AuthCallbackURL(s.provider)(r.Context(), id), http.StatusFound)
}

var devicePage = template.Must(template.New("device").Parse(`<!doctype html>
<title>Test provider: device sign-in</title>
<h1>Sign in a device</h1>
{{if .Error}}<p id="error">{{.Error}}</p>{{end}}
{{if .Done}}<p id="done">The device is signed in; you can close this page.</p>{{else}}
<form method="post" action="/device">
<label>Code <input id="user_code" name="user_code" value="{{.UserCode}}"></label>
<label>User name <input id="username" name="username"></label>
<label>Password <input id="password" name="password" type="password"></label>
<button id="submit" name="action" value="allow">Allow</button>
<button id="deny" name="action" value="deny">Deny</button>
</form>{{end}}
`))

// device is the page the device flow sends a person to with their code.
func (s *Server) device(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	data := map[string]any{"UserCode": r.FormValue("user_code")}
	if r.Method == http.MethodPost {
		err := s.st.completeDevice(r.FormValue("user_code"), r.FormValue("username"), r.FormValue("password"), r.FormValue("action") == "deny")
		if err != nil {
			w.WriteHeader(http.StatusUnauthorized)
			data["Error"] = err.Error()
		} else {
			data["Done"] = true
		}
	}
	_ = devicePage.Execute(w, data)
}

// SignIn follows an authorization URL through the login form as a browser
// would, signing in as username, and returns where the provider finally
// sends the browser: the client's redirect URI with code and state (or
// error). It never requests that URI.
func (s *Server) SignIn(ctx context.Context, authURL, username, password string) (*url.URL, error) {
	return s.drive(ctx, authURL, url.Values{"username": {username}, "password": {password}, "action": {"login"}})
}

// Deny follows an authorization URL to the login form and declines.
func (s *Server) Deny(ctx context.Context, authURL string) (*url.URL, error) {
	return s.drive(ctx, authURL, url.Values{"action": {"deny"}})
}

func (s *Server) drive(ctx context.Context, authURL string, form url.Values) (*url.URL, error) {
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	next, err := url.Parse(authURL)
	if err != nil {
		return nil, err
	}
	posted := false
	for range 10 {
		if !strings.HasPrefix(next.String(), s.URL+"/") {
			return next, nil
		}
		var req *http.Request
		if next.Path == "/login" && !posted {
			form := cloneWith(form, "id", next.Query().Get("id"))
			req, err = http.NewRequestWithContext(ctx, http.MethodPost, s.URL+"/login", strings.NewReader(form.Encode()))
			if err == nil {
				req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			}
			posted = true
		} else {
			req, err = http.NewRequestWithContext(ctx, http.MethodGet, next.String(), nil)
		}
		if err != nil {
			return nil, err
		}
		resp, err := c.Do(req)
		if err != nil {
			return nil, err
		}
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		resp.Body.Close()
		loc, err := resp.Location()
		if err != nil {
			return nil, fmt.Errorf("oidctest: %s %s answered %s without a redirect: %s", req.Method, req.URL.Path, resp.Status, body)
		}
		next = loc
	}
	return nil, errors.New("oidctest: too many redirects")
}

func cloneWith(v url.Values, key, value string) url.Values {
	out := url.Values{key: {value}}
	for k, vs := range v {
		out[k] = vs
	}
	return out
}

// ApproveDevice signs in on the device page with a user code, as the
// person holding the device would in a browser.
func (s *Server) ApproveDevice(ctx context.Context, userCode, username, password string) error {
	form := url.Values{"user_code": {userCode}, "username": {username}, "password": {password}, "action": {"allow"}}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.URL+"/device", strings.NewReader(form.Encode()))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return fmt.Errorf("oidctest: device page answered %s: %s", resp.Status, body)
	}
	return nil
}
