package config

import (
	"errors"
	"io/fs"
	"net"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
)

// OIDCCredential is the systemd credential the client secret is read from
// when auth.oidc.client_secret_file is not set.
const OIDCCredential = "oidc-client-secret"

// OIDCCallbackPath is where the provider sends the browser back to, under
// server.public_url, when auth.oidc.redirect_url is not set.
const OIDCCallbackPath = "/ui/auth/oidc/callback"

// OIDCConfig is [auth.oidc]: people sign in with an OpenID Connect
// provider (Okta, Entra ID, Keycloak, …). Empty Issuer: OIDC sign-in is off.
type OIDCConfig struct {
	// Issuer is the provider's issuer URL; its discovery document is read
	// from Issuer + "/.well-known/openid-configuration".
	Issuer   string `toml:"issuer"`
	ClientID string `toml:"client_id"`
	// ClientSecret comes only from ClientSecretFile or the credential
	// oidc-client-secret, never from this file.
	ClientSecret     Secret `toml:"-"`
	ClientSecretFile string `toml:"client_secret_file"`
	// Scopes are asked for at sign-in; openid must be among them.
	Scopes []string `toml:"scopes"`
	// GroupsClaim is the ID token claim holding the person's groups, a
	// dotted path for nested claims ("realm_access.roles").
	GroupsClaim string `toml:"groups_claim"`
	// RedirectURL is this orchestrator's callback as registered with the
	// provider; "" is server.public_url + OIDCCallbackPath.
	RedirectURL string `toml:"redirect_url"`
	// DisplayName names the provider on the dashboard's sign-in link
	// ("Sign in with <display_name>").
	DisplayName string `toml:"display_name"`
	// CLIClientID is the provider's public client (no secret) that
	// simpletunerctl login signs in with; "" turns that login off.
	CLIClientID string `toml:"cli_client_id"`
}

// Enabled reports whether OIDC sign-in is configured.
func (c OIDCConfig) Enabled() bool { return c.Issuer != "" }

// OIDCRedirectURL is auth.oidc.redirect_url, or the callback under
// server.public_url when it is not set.
func (c *Orchestrator) OIDCRedirectURL() string {
	if c.Auth.OIDC.RedirectURL != "" {
		return c.Auth.OIDC.RedirectURL
	}
	if u := c.PublicURL(); u != nil {
		return u.String() + OIDCCallbackPath
	}
	return ""
}

func defaultOIDC() OIDCConfig {
	return OIDCConfig{Scopes: []string{"openid", "profile", "email"}, GroupsClaim: "groups", DisplayName: "single sign-on"}
}

// refusedKeys are keys the file may not hold, with what to do instead.
var refusedKeys = map[string]string{
	"auth.oidc.client_secret": "a client secret is not kept in this file: put it in the file auth.oidc.client_secret_file names " +
		"(mode 0640 or stricter) or in the systemd credential " + OIDCCredential,
}

// oidcSecret reads the client secret from auth.oidc.client_secret_file or,
// without one, from the systemd credential; an empty credential file (as
// the package ships it) is "not configured".
func (l *loader) oidcSecret(c *Orchestrator, getenv func(string) string) {
	d := &c.Auth.OIDC
	if d.ClientSecretFile != "" {
		s, err := readSecret(d.ClientSecretFile, false)
		if err != nil {
			l.errf("auth.oidc.client_secret_file", "cannot read %s: %v", d.ClientSecretFile, err)
			l.failed["auth.oidc.client_secret_file"] = true
			return
		}
		d.ClientSecret = Secret(s)
		return
	}
	dir := getenv("CREDENTIALS_DIRECTORY")
	if dir == "" {
		return
	}
	p := filepath.Join(dir, OIDCCredential)
	s, err := readSecret(p, false)
	switch {
	case errors.Is(err, fs.ErrNotExist) || errors.Is(err, errEmptySecret):
	case err != nil:
		l.errAt(p, "auth.oidc.client_secret_file", "cannot read systemd credential %q: %v", OIDCCredential, err)
		l.failed["auth.oidc.client_secret_file"] = true
	default:
		d.ClientSecret = Secret(s)
	}
}

func (l *loader) validateOIDC(c *Orchestrator) {
	d := c.Auth.OIDC
	if !d.Enabled() {
		for _, k := range []struct{ key, val string }{
			{"auth.oidc.client_id", d.ClientID}, {"auth.oidc.client_secret_file", d.ClientSecretFile}, {"auth.oidc.redirect_url", d.RedirectURL},
			{"auth.oidc.cli_client_id", d.CLIClientID},
		} {
			if k.val != "" {
				l.errf(k.key, "is set but auth.oidc.issuer is empty (OIDC sign-in is off without it)")
			}
		}
		return
	}
	l.oidcIssuer(d.Issuer)
	if d.ClientID == "" {
		l.errf("auth.oidc.client_id", "must be set with auth.oidc.issuer (the id the provider gave this orchestrator)")
	}
	if d.ClientSecret == "" && !l.failed["auth.oidc.client_secret_file"] {
		l.errf("auth.oidc.client_secret_file", "no client secret: name a file holding it here, or put it in the systemd credential %s",
			OIDCCredential)
	}
	if !slices.Contains(d.Scopes, "openid") {
		l.errf("auth.oidc.scopes", "%q must include \"openid\"", d.Scopes)
	}
	if strings.TrimSpace(d.GroupsClaim) == "" {
		l.errf("auth.oidc.groups_claim", "must not be empty (the claim holding the person's groups, \"groups\" by default)")
	}
	if strings.TrimSpace(d.DisplayName) == "" {
		l.errf("auth.oidc.display_name", "must not be empty (the name on the dashboard's sign-in link)")
	}
	l.oidcRedirect(c)
}

// oidcIssuer wants https, or http only to this machine (a test provider).
func (l *loader) oidcIssuer(issuer string) {
	u, err := url.Parse(issuer)
	switch {
	case err != nil:
		l.errf("auth.oidc.issuer", "%q: %v", issuer, err)
	case u.Host == "" || (u.Scheme != "https" && u.Scheme != "http"):
		l.errf("auth.oidc.issuer", "%q is not an https:// URL", issuer)
	case u.Scheme == "http" && !loopbackHost(u.Hostname()):
		l.errf("auth.oidc.issuer", "%q is plain http; an identity provider must be reached over https (http only on loopback)", issuer)
	case u.RawQuery != "" || u.Fragment != "":
		l.errf("auth.oidc.issuer", "%q must have no query or fragment", issuer)
	}
}

func (l *loader) oidcRedirect(c *Orchestrator) {
	d := c.Auth.OIDC
	if d.RedirectURL == "" {
		if c.PublicURL() == nil {
			l.errf("auth.oidc.redirect_url", "must be set, or server.public_url from which it defaults to server.public_url + %q",
				OIDCCallbackPath)
		}
		return
	}
	u, err := url.Parse(d.RedirectURL)
	switch {
	case err != nil:
		l.errf("auth.oidc.redirect_url", "%q: %v", d.RedirectURL, err)
	case u.Host == "" || (u.Scheme != "https" && u.Scheme != "http"):
		l.errf("auth.oidc.redirect_url", "%q is not an absolute http(s) URL", d.RedirectURL)
	case u.Fragment != "":
		l.errf("auth.oidc.redirect_url", "%q must have no fragment", d.RedirectURL)
	}
}

func loopbackHost(h string) bool {
	if h == "localhost" {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}
