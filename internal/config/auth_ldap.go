package config

import (
	"net/url"
	"strings"
	"time"

	"github.com/go-ldap/ldap/v3"
)

// LDAPConfig is [auth.ldap]: people sign in with a directory user name and
// password (OpenLDAP, Active Directory). Empty URL: LDAP sign-in is off.
type LDAPConfig struct {
	// URL is ldaps://host[:port], or ldap://host[:port] with StartTLS.
	URL      string `toml:"url"`
	StartTLS bool   `toml:"start_tls"`
	// CAFile is the PEM bundle the server's certificate is checked
	// against; "" uses the system's roots.
	CAFile string `toml:"ca_file"`
	// BindDN and BindPassword are the service account that searches for
	// the user; both empty binds anonymously.
	BindDN           string `toml:"bind_dn"`
	BindPassword     Secret `toml:"bind_password"`
	BindPasswordFile string `toml:"bind_password_file"`
	BaseDN           string `toml:"base_dn"`
	// UserFilter finds the one entry of a user name; {username} is
	// replaced by the escaped name.
	UserFilter string `toml:"user_filter"`
	// GroupBaseDN ("" = BaseDN) and GroupFilter ({dn} = the user's DN)
	// find the user's groups; with GroupAttribute set (memberOf), the
	// groups are read from the user's entry instead.
	GroupBaseDN    string `toml:"group_base_dn"`
	GroupFilter    string `toml:"group_filter"`
	GroupAttribute string `toml:"group_attribute"`
	EmailAttribute string `toml:"email_attribute"`
	NameAttribute  string `toml:"name_attribute"`
	// Timeout bounds connecting and each request to the server.
	Timeout Duration `toml:"timeout"`
	// MaxConcurrent bounds sign-ins in flight; more are refused as busy.
	MaxConcurrent int `toml:"max_concurrent"`
}

// Enabled reports whether LDAP sign-in is configured.
func (c LDAPConfig) Enabled() bool { return c.URL != "" }

func defaultLDAP() LDAPConfig {
	return LDAPConfig{
		UserFilter:     "(uid={username})",
		GroupFilter:    "(&(objectClass=groupOfNames)(member={dn}))",
		EmailAttribute: "mail",
		NameAttribute:  "cn",
		Timeout:        D(5 * time.Second),
		MaxConcurrent:  8,
	}
}

func (l *loader) validateLDAP(c *Orchestrator) {
	d := c.Auth.LDAP
	if n := d.MaxConcurrent; n < 1 || n > 1024 {
		l.errf("auth.ldap.max_concurrent", "must be from 1 to 1024, got %d", n)
	}
	if d.BindPassword != "" && d.BindDN == "" {
		l.errf("auth.ldap.bind_password", "is set but auth.ldap.bind_dn is empty")
	}
	l.readable("auth.ldap.ca_file", d.CAFile)
	for _, k := range []struct{ key, dn string }{
		{"auth.ldap.bind_dn", d.BindDN}, {"auth.ldap.base_dn", d.BaseDN}, {"auth.ldap.group_base_dn", d.GroupBaseDN},
	} {
		if _, err := ldap.ParseDN(k.dn); k.dn != "" && err != nil {
			l.errf(k.key, "%q is not a DN: %v", k.dn, err)
		}
	}
	l.ldapFilter("auth.ldap.user_filter", d.UserFilter, "{username}", true)
	l.ldapFilter("auth.ldap.group_filter", d.GroupFilter, "{dn}", d.GroupAttribute == "")
	if d.URL == "" {
		return
	}
	l.ldapURL(d)
	if d.BindDN != "" && d.BindPassword == "" {
		l.errf("auth.ldap.bind_dn", "is set but no bind password was given (auth.ldap.bind_password_file, the credential ldap-bind-password or SIMPLETUNER_LDAP_BIND_PASSWORD)")
	}
	if d.BaseDN == "" {
		l.errf("auth.ldap.base_dn", "must be set with auth.ldap.url (where to search for users)")
	}
}

// ldapURL allows ldaps://, and ldap:// only with StartTLS: a password
// never crosses the network in clear.
func (l *loader) ldapURL(d LDAPConfig) {
	u, err := url.Parse(d.URL)
	switch {
	case err != nil:
		l.errf("auth.ldap.url", "%q: %v", d.URL, err)
	case u.Host == "" || u.Hostname() == "":
		l.errf("auth.ldap.url", "%q has no host (want ldaps://host[:port])", d.URL)
	case u.User != nil || (u.Path != "" && u.Path != "/") || u.RawQuery != "":
		l.errf("auth.ldap.url", "%q: give only scheme, host and port; the base DN is auth.ldap.base_dn", d.URL)
	case u.Scheme == "ldaps" && d.StartTLS:
		l.errf("auth.ldap.start_tls", "is for ldap:// URLs; %q is TLS already", d.URL)
	case u.Scheme == "ldap" && !d.StartTLS:
		l.errf("auth.ldap.url", "%q is plain LDAP, which would send passwords in clear; use ldaps:// or set start_tls = true", d.URL)
	case u.Scheme != "ldap" && u.Scheme != "ldaps":
		l.errf("auth.ldap.url", "%q: want ldaps://host[:port] or ldap://host[:port] with start_tls", d.URL)
	}
}

// ldapFilter checks that a filter names its placeholder and parses once
// the placeholder is filled.
func (l *loader) ldapFilter(key, filter, placeholder string, required bool) {
	if !required {
		return
	}
	if !strings.Contains(filter, placeholder) {
		l.errf(key, "%q must contain %s", filter, placeholder)
		return
	}
	if _, err := ldap.CompileFilter(strings.ReplaceAll(filter, placeholder, "x")); err != nil {
		l.errf(key, "%q is not an LDAP filter: %v", filter, err)
	}
}
