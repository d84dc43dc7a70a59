package ctl

// simpletunerctl login, logout and the renewal of a login: a person signs
// in with the orchestrator's OpenID provider (device authorization grant,
// or a redirect to a listener on 127.0.0.1 where the provider has no
// device grant) or its directory, and keeps the short-lived token the
// orchestrator gives for it in login.toml.

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os/exec"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/oauth2"

	"github.com/simpletuner/simpletuner-orchestration/internal/api"
	"github.com/simpletuner/simpletuner-orchestration/internal/ctl/client"
	"github.com/simpletuner/simpletuner-orchestration/internal/ctl/ctlconf"
	"github.com/simpletuner/simpletuner-orchestration/internal/version"
)

// loginOptions are login's flags.
type loginOptions struct {
	ldap, passwordStdin, noBrowser, loopback bool
	username                                 string
}

// renewBefore is how long before its expiry a login is renewed.
const renewBefore = time.Minute

// loginExpiredError: the login ran out and cannot be renewed here.
type loginExpiredError struct {
	at time.Time
	// refresh is why renewing with the refresh token failed, if it did.
	refresh error
}

func (e *loginExpiredError) Error() string {
	msg := fmt.Sprintf("your login expired at %s; run simpletunerctl login", e.at.UTC().Format(time.RFC3339))
	if e.refresh != nil {
		msg += fmt.Sprintf(" (renewing it failed: %v)", e.refresh)
	}
	return msg
}

func (a *app) loginCommands() []*cobra.Command {
	var o loginOptions
	login := &cobra.Command{
		Use:   "login",
		Short: "Sign in with single sign-on or the directory; keeps a short-lived token",
		Long: `login signs you in as a person: with the orchestrator's single sign-on
(you confirm a code in a browser), or with --ldap, your directory user name
and password. The token it gets lasts [auth] login_token_ttl (12 hours by
default) and is kept in ~/.config/simpletuner/login.toml for this URL.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.login(cmd.Context(), o)
		},
	}
	f := login.Flags()
	f.BoolVar(&o.ldap, "ldap", false, "sign in with a directory user name and password")
	f.StringVar(&o.username, "username", "", "directory user name (--ldap; asked for when not given)")
	f.BoolVar(&o.passwordStdin, "password-stdin", false, "read the directory password from standard input (--ldap)")
	f.BoolVar(&o.noBrowser, "no-browser", false, "do not open a browser; print the address to open instead")
	f.BoolVar(&o.loopback, "loopback", false, "sign in through a browser redirect to this machine even where the provider has the device grant")
	logout := &cobra.Command{
		Use:   "logout",
		Short: "Revoke the login's token and forget it",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.logout(cmd.Context())
		},
	}
	return []*cobra.Command{login, logout}
}

// loginURL is the orchestrator login signs in to: a URL, not the socket.
func (a *app) loginURL() (string, *ctlconf.File, error) {
	file, err := ctlconf.Load(ctlconf.DefaultPath(a.env.Getenv))
	if err != nil {
		return "", nil, err
	}
	if file == nil {
		file = &ctlconf.File{}
	}
	u := first(a.url, a.env.Getenv("SIMPLETUNER_URL"), file.URL)
	if u == "" {
		u = client.DefaultURL
	}
	if strings.HasPrefix(u, "unix:") || strings.HasPrefix(u, "/") {
		return "", nil, usagef("login needs the orchestrator's http(s) URL (--url); on the admin socket you need no login")
	}
	return strings.TrimSuffix(u, "/"), file, nil
}

// anonymous is a client of url without a token, for signing in.
func (a *app) anonymous(u string, file *ctlconf.File) (*client.Client, error) {
	cl, err := client.New(client.Options{URL: u, Timeout: a.timeout, UserAgent: "simpletunerctl/" + version.Version,
		CAFile: first(a.caFile, file.CAFile), CertFile: first(a.certFile, file.CertFile), KeyFile: first(a.keyFile, file.KeyFile)})
	if err != nil {
		return nil, &usageError{err.Error()}
	}
	return cl, nil
}

func (a *app) login(ctx context.Context, o loginOptions) error {
	u, file, err := a.loginURL()
	if err != nil {
		return err
	}
	cl, err := a.anonymous(u, file)
	if err != nil {
		return err
	}
	entry, err := a.signIn(ctx, cl, u, o)
	if err != nil {
		return err
	}
	return a.saveLogin(entry)
}

// signIn runs a sign-in with the provider o chooses and returns the login.
func (a *app) signIn(ctx context.Context, cl *client.Client, u string, o loginOptions) (ctlconf.Login, error) {
	var providers api.SignInProviders
	if _, err := cl.GetJSON(ctx, "/api/auth/providers", nil, &providers); err != nil {
		return ctlconf.Login{}, err
	}
	switch {
	case o.ldap && !providers.LDAP:
		return ctlconf.Login{}, fmt.Errorf("%s does not sign people in with a directory ([auth.ldap] is not configured)", u)
	case o.ldap || providers.OIDC == nil && providers.LDAP:
		return a.ldapLogin(ctx, cl, u, o)
	case providers.OIDC == nil:
		return ctlconf.Login{}, fmt.Errorf("%s has no sign-in for people configured ([auth.oidc] cli_client_id or [auth.ldap]); use an admin token", u)
	}
	return a.oidcLogin(ctx, cl, u, *providers.OIDC, o)
}

func (a *app) ldapLogin(ctx context.Context, cl *client.Client, u string, o loginOptions) (ctlconf.Login, error) {
	in := bufio.NewReader(a.env.Stdin)
	user := strings.TrimSpace(o.username)
	if user == "" {
		if !a.env.StdinTTY {
			return ctlconf.Login{}, usagef("--username is required when standard input is not a terminal")
		}
		fmt.Fprint(a.env.Stderr, "User name: ")
		line, err := in.ReadString('\n')
		if err != nil && line == "" {
			return ctlconf.Login{}, fmt.Errorf("reading the user name: %w", err)
		}
		user = strings.TrimSpace(line)
	}
	password, err := a.password(in, o)
	if err != nil {
		return ctlconf.Login{}, err
	}
	var got api.Login
	if _, err := cl.JSON(ctx, client.Request{Method: http.MethodPost, Path: "/api/auth/ldap/login",
		Body: api.LDAPLogin{Username: user, Password: password}}, &got); err != nil {
		return ctlconf.Login{}, err
	}
	return loginEntry(u, got, ctlconf.Login{Provider: "ldap", Username: user}), nil
}

// password is the directory password: one line of standard input with
// --password-stdin, else asked for on the terminal without echo.
func (a *app) password(in *bufio.Reader, o loginOptions) (string, error) {
	if o.passwordStdin {
		line, err := in.ReadString('\n')
		if err != nil && !errors.Is(err, io.EOF) {
			return "", fmt.Errorf("reading the password from standard input: %w", err)
		}
		return strings.TrimRight(line, "\r\n"), nil
	}
	if !a.env.StdinTTY || a.env.ReadPassword == nil {
		return "", usagef("standard input is not a terminal: pass the password with --password-stdin")
	}
	fmt.Fprint(a.env.Stderr, "Password: ")
	p, err := a.env.ReadPassword()
	fmt.Fprintln(a.env.Stderr)
	return p, err
}

// discovery is the part of the provider's metadata login needs.
type discovery struct {
	Auth   string `json:"authorization_endpoint"`
	Token  string `json:"token_endpoint"`
	Device string `json:"device_authorization_endpoint"`
}

func discover(ctx context.Context, issuer string) (discovery, error) {
	var d discovery
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(issuer, "/")+"/.well-known/openid-configuration", nil)
	if err != nil {
		return d, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return d, fmt.Errorf("the identity provider %s: %w", issuer, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return d, fmt.Errorf("the identity provider %s answered %s to its discovery", issuer, resp.Status)
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&d); err != nil {
		return d, fmt.Errorf("the identity provider %s: its discovery does not parse: %w", issuer, err)
	}
	return d, nil
}

func (a *app) oidcLogin(ctx context.Context, cl *client.Client, u string, p api.OIDCProvider, o loginOptions) (ctlconf.Login, error) {
	d, err := discover(ctx, p.Issuer)
	if err != nil {
		return ctlconf.Login{}, err
	}
	cfg := oauth2.Config{ClientID: p.ClientID, Endpoint: oauth2.Endpoint{AuthURL: d.Auth, TokenURL: d.Token, DeviceAuthURL: d.Device},
		Scopes: withScope(p.Scopes, "offline_access")}
	var tok *oauth2.Token
	if d.Device != "" && !o.loopback {
		tok, err = a.deviceGrant(ctx, &cfg, o)
	} else {
		tok, err = a.loopbackGrant(ctx, &cfg, o)
	}
	if err != nil {
		return ctlconf.Login{}, err
	}
	got, err := exchange(ctx, cl, tok)
	if err != nil {
		return ctlconf.Login{}, err
	}
	return loginEntry(u, got, ctlconf.Login{Provider: "oidc", Issuer: p.Issuer, ClientID: p.ClientID, RefreshToken: tok.RefreshToken}), nil
}

func withScope(scopes []string, s string) []string {
	for _, have := range scopes {
		if have == s {
			return scopes
		}
	}
	return append(append([]string{}, scopes...), s)
}

// exchange trades the provider's ID token for the orchestrator's login.
func exchange(ctx context.Context, cl *client.Client, tok *oauth2.Token) (api.Login, error) {
	raw, _ := tok.Extra("id_token").(string)
	if raw == "" {
		return api.Login{}, errors.New("the identity provider gave no ID token (is the openid scope allowed for this client?)")
	}
	var got api.Login
	_, err := cl.JSON(ctx, client.Request{Method: http.MethodPost, Path: "/api/auth/oidc/exchange", Body: api.OIDCExchange{IDToken: raw}}, &got)
	return got, err
}

// deviceGrant: the person confirms a code on the provider's page, from any
// device, while this polls for the token.
func (a *app) deviceGrant(ctx context.Context, cfg *oauth2.Config, o loginOptions) (*oauth2.Token, error) {
	da, err := cfg.DeviceAuth(ctx)
	if err != nil {
		return nil, fmt.Errorf("the identity provider refused to start the sign-in: %w", err)
	}
	a.note("To sign in, open %s and enter the code %s", da.VerificationURI, da.UserCode)
	if da.VerificationURIComplete != "" {
		a.openBrowser(da.VerificationURIComplete, o)
	} else {
		a.openBrowser(da.VerificationURI, o)
	}
	a.note("Waiting for the sign-in to be confirmed…")
	tok, err := cfg.DeviceAccessToken(ctx, da)
	if err != nil {
		return nil, fmt.Errorf("the sign-in did not complete: %w", err)
	}
	return tok, nil
}

// loopbackGrant: the authorization code flow with PKCE, the provider
// sending the browser back to a listener on 127.0.0.1.
func (a *app) loopbackGrant(ctx context.Context, cfg *oauth2.Config, o loginOptions) (*oauth2.Token, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	defer ln.Close()
	cfg.RedirectURL = "http://" + ln.Addr().String() + "/callback"
	state, verifier := randomString(), oauth2.GenerateVerifier()
	codes := make(chan url.Values, 1)
	srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/callback" {
			http.NotFound(w, r)
			return
		}
		fmt.Fprintln(w, "simpletunerctl: you may close this page and go back to the terminal.")
		select {
		case codes <- r.URL.Query():
		default:
		}
	})}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	authURL := cfg.AuthCodeURL(state, oauth2.S256ChallengeOption(verifier))
	a.note("To sign in, open %s", authURL)
	a.openBrowser(authURL, o)
	var q url.Values
	select {
	case q = <-codes:
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-time.After(10 * time.Minute):
		return nil, errors.New("the sign-in did not come back within 10 minutes")
	}
	switch {
	case q.Get("state") != state:
		return nil, errors.New("the sign-in came back with another state; start again")
	case q.Get("error") != "":
		return nil, fmt.Errorf("the identity provider did not sign you in: %s %s", q.Get("error"), q.Get("error_description"))
	}
	tok, err := cfg.Exchange(ctx, q.Get("code"), oauth2.VerifierOption(verifier))
	if err != nil {
		return nil, fmt.Errorf("the identity provider refused the code: %w", err)
	}
	return tok, nil
}

func randomString() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

// openBrowser opens address on a desktop, where there is one.
func (a *app) openBrowser(address string, o loginOptions) {
	if o.noBrowser || !a.env.StdoutTTY || a.env.Getenv("DISPLAY") == "" && a.env.Getenv("WAYLAND_DISPLAY") == "" {
		return
	}
	_ = exec.Command("xdg-open", address).Start()
}

func loginEntry(u string, got api.Login, e ctlconf.Login) ctlconf.Login {
	e.URL, e.Token, e.TokenID = u, got.Token, got.TokenID
	e.ExpiresAt, _ = time.Parse(time.RFC3339, got.ExpiresAt)
	e.Person = first(got.Person.Name, got.Person.Username, got.Person.Email, got.Person.ID)
	return e
}

func (a *app) saveLogin(e ctlconf.Login) error {
	logins, err := ctlconf.LoadLogins(ctlconf.DefaultLoginPath(a.env.Getenv))
	if err != nil {
		return err
	}
	logins.Put(e)
	if err := logins.Save(); err != nil {
		return fmt.Errorf("keeping the login in %s: %w", logins.Path, err)
	}
	a.note("Logged in to %s as %s until %s.", e.URL, e.Person, e.ExpiresAt.Local().Format("2006-01-02 15:04 MST"))
	return nil
}

func (a *app) logout(ctx context.Context) error {
	u, file, err := a.loginURL()
	if err != nil {
		return err
	}
	logins, err := ctlconf.LoadLogins(ctlconf.DefaultLoginPath(a.env.Getenv))
	if err != nil {
		return err
	}
	e := logins.Find(u)
	if e == nil {
		a.note("Not logged in to %s.", u)
		return nil
	}
	cl, err := client.New(client.Options{URL: u, Token: e.Token, Timeout: a.timeout, UserAgent: "simpletunerctl/" + version.Version,
		CAFile: first(a.caFile, file.CAFile), CertFile: first(a.certFile, file.CertFile), KeyFile: first(a.keyFile, file.KeyFile)})
	if err != nil {
		return &usageError{err.Error()}
	}
	_, err = cl.Do(ctx, client.Request{Method: http.MethodDelete, Path: "/api/auth/tokens/self"})
	var ae *client.APIError
	if err != nil && !(errors.As(err, &ae) && ae.Status == http.StatusUnauthorized) {
		return err // the token may still work: keep it so that logout can be tried again
	}
	logins.Remove(u)
	if err := logins.Save(); err != nil {
		return err
	}
	a.note("Logged out of %s.", u)
	return nil
}

// loginToken is the token of the login for u, renewed when it is about to
// expire: with the provider's refresh token, else (on a terminal) by
// signing in again; otherwise the login has expired.
func (a *app) loginToken(u string, file *ctlconf.File) (string, error) {
	logins, err := ctlconf.LoadLogins(ctlconf.DefaultLoginPath(a.env.Getenv))
	if err != nil {
		return "", err
	}
	e := logins.Find(u)
	if e == nil {
		return "", nil
	}
	a.tokenSource = "login (" + e.Provider + ")"
	if a.env.Now().Add(renewBefore).Before(e.ExpiresAt) {
		return e.Token, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	cl, err := a.anonymous(u, file)
	if err != nil {
		return "", err
	}
	renewed, err := a.renew(ctx, cl, *e)
	if errors.As(err, new(*loginExpiredError)) && a.env.Now().Before(e.ExpiresAt) {
		return e.Token, nil // cannot renew it yet; it still works for a moment
	}
	if err != nil {
		return "", err
	}
	if err := a.saveLogin(renewed); err != nil {
		return "", err
	}
	return renewed.Token, nil
}

func (a *app) renew(ctx context.Context, cl *client.Client, e ctlconf.Login) (ctlconf.Login, error) {
	var refreshErr error
	if e.RefreshToken != "" {
		renewed, err := refresh(ctx, cl, e)
		if err == nil {
			return renewed, nil
		}
		refreshErr = err
	}
	if !a.env.StdinTTY {
		return ctlconf.Login{}, &loginExpiredError{at: e.ExpiresAt, refresh: refreshErr}
	}
	a.note("Your login to %s expired at %s; signing in again.", e.URL, e.ExpiresAt.Local().Format("2006-01-02 15:04 MST"))
	return a.signIn(ctx, cl, e.URL, loginOptions{ldap: e.Provider == "ldap", username: e.Username})
}

// refresh gets a new ID token with the provider's refresh token and
// exchanges it again.
func refresh(ctx context.Context, cl *client.Client, e ctlconf.Login) (ctlconf.Login, error) {
	d, err := discover(ctx, e.Issuer)
	if err != nil {
		return ctlconf.Login{}, err
	}
	cfg := oauth2.Config{ClientID: e.ClientID, Endpoint: oauth2.Endpoint{TokenURL: d.Token}}
	tok, err := cfg.TokenSource(ctx, &oauth2.Token{RefreshToken: e.RefreshToken}).Token()
	if err != nil {
		return ctlconf.Login{}, err
	}
	got, err := exchange(ctx, cl, tok)
	if err != nil {
		return ctlconf.Login{}, err
	}
	if tok.RefreshToken != "" {
		e.RefreshToken = tok.RefreshToken
	}
	return loginEntry(e.URL, got, e), nil
}
