// Package ldap signs people in against an LDAP directory (OpenLDAP, Active
// Directory): a service account finds the one entry of the user name, a
// bind as that entry checks the password, and the entry's groups come from
// a group search or a memberOf-style attribute.
package ldap

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	goldap "github.com/go-ldap/ldap/v3"

	"github.com/simpletuner/simpletuner-orchestration/internal/auth"
	"github.com/simpletuner/simpletuner-orchestration/internal/config"
	"github.com/simpletuner/simpletuner-orchestration/internal/identity"
)

// MaxUsername bounds a user name in bytes.
const MaxUsername = 256

var (
	// ErrInvalid is every refusal that is about the credentials: a wrong
	// password, an unknown or ambiguous user name, a malformed one. They
	// read the same so that a caller learns nothing about which it was.
	ErrInvalid = identity.ErrInvalidCredentials
	// ErrBusy: max_concurrent sign-ins are in flight already.
	ErrBusy = identity.ErrBusy
	// ErrUnavailable: the directory could not be reached or failed; the
	// wrapped error says how (it never holds the password).
	ErrUnavailable = identity.ErrDirectoryUnavailable
	// ErrThrottled: too many recent failures for this user name; the
	// directory is not asked until they age out, which slows password
	// spraying and keeps a directory's own lockout from tripping.
	ErrThrottled = identity.ErrThrottled
)

// Authenticator checks user names and passwords against one directory.
type Authenticator struct {
	cfg     config.LDAPConfig
	url     *url.URL
	tls     *tls.Config
	timeout time.Duration
	slots   chan struct{}
	// failures counts ErrInvalid per user name (lower case).
	failures *auth.FailureLimiter
}

// New checks the configuration and reads the CA file. Plain ldap:// without
// StartTLS is refused: the password would cross the network in clear.
func New(cfg config.LDAPConfig) (*Authenticator, error) {
	u, err := url.Parse(cfg.URL)
	if err != nil {
		return nil, fmt.Errorf("auth.ldap.url: %w", err)
	}
	switch {
	case u.Scheme == "ldaps" && !cfg.StartTLS, u.Scheme == "ldap" && cfg.StartTLS:
	case u.Scheme == "ldap":
		return nil, fmt.Errorf("auth.ldap.url %q is plain LDAP; use ldaps:// or start_tls", cfg.URL)
	default:
		return nil, fmt.Errorf("auth.ldap.url %q: want ldaps:// or ldap:// with start_tls", cfg.URL)
	}
	if u.Hostname() == "" {
		return nil, fmt.Errorf("auth.ldap.url %q has no host", cfg.URL)
	}
	if cfg.MaxConcurrent < 1 || cfg.Timeout.Duration <= 0 {
		return nil, errors.New("auth.ldap: max_concurrent and timeout must be positive")
	}
	tc := &tls.Config{ServerName: u.Hostname(), MinVersion: tls.VersionTLS12}
	if cfg.CAFile != "" {
		pem, err := os.ReadFile(cfg.CAFile)
		if err != nil {
			return nil, fmt.Errorf("auth.ldap.ca_file: %w", err)
		}
		tc.RootCAs = x509.NewCertPool()
		if !tc.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("auth.ldap.ca_file %s holds no PEM certificate", cfg.CAFile)
		}
	}
	return &Authenticator{cfg: cfg, url: u, tls: tc, timeout: cfg.Timeout.Duration,
		slots:    make(chan struct{}, cfg.MaxConcurrent),
		failures: auth.NewFailureLimiter(auth.DefaultFailuresPerMinute, nil)}, nil
}

// Issuer names this directory in a person's identity.
func (a *Authenticator) Issuer() string { return "ldap:" + a.cfg.URL }

// Authenticate checks user and password and returns who they are, with the
// DNs of their groups. Credential problems are ErrInvalid; a full house is
// ErrBusy; a directory that is down or slow is ErrUnavailable, within a few
// timeouts at most.
func (a *Authenticator) Authenticate(ctx context.Context, user, password string) (identity.Result, error) {
	if !validUsername(user) || password == "" {
		return identity.Result{}, ErrInvalid
	}
	key := "ldap:" + strings.ToLower(user)
	if wait, blocked := a.failures.Blocked(key); blocked {
		return identity.Result{}, fmt.Errorf("%w (in %s)", ErrThrottled, wait.Round(time.Second))
	}
	select {
	case a.slots <- struct{}{}:
		defer func() { <-a.slots }()
	default:
		return identity.Result{}, ErrBusy
	}
	// Each request is bounded by the timeout; the whole sign-in (dial,
	// TLS, two binds and two searches) by a few of them.
	ctx, cancel := context.WithTimeout(ctx, 6*a.timeout)
	defer cancel()
	conn, err := a.connect(ctx)
	if err != nil {
		return identity.Result{}, unavailable(ctx, err)
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	res, err := a.signIn(ctx, conn, user, password)
	if errors.Is(err, ErrInvalid) {
		a.failures.Fail(key)
	}
	return res, err
}

func (a *Authenticator) signIn(ctx context.Context, conn *goldap.Conn, user, password string) (identity.Result, error) {
	if err := a.serviceBind(conn); err != nil {
		return identity.Result{}, unavailable(ctx, fmt.Errorf("bind as %s: %w", a.cfg.BindDN, err))
	}
	entry, err := a.findUser(conn, user)
	if err != nil {
		return identity.Result{}, unavailable(ctx, err)
	}
	if err := conn.Bind(entry.DN, password); err != nil {
		if goldap.IsErrorWithCode(err, goldap.LDAPResultInvalidCredentials) {
			return identity.Result{}, ErrInvalid
		}
		return identity.Result{}, unavailable(ctx, fmt.Errorf("bind as the user: %w", err))
	}
	groups, err := a.groups(conn, entry)
	if err != nil {
		return identity.Result{}, unavailable(ctx, err)
	}
	return identity.Result{
		Provider: "ldap",
		Issuer:   a.Issuer(),
		Subject:  subject(entry),
		Username: user,
		Email:    entry.GetAttributeValue(a.cfg.EmailAttribute),
		Name:     entry.GetAttributeValue(a.cfg.NameAttribute),
		Groups:   groups,
	}, nil
}

// subject is what stays the same for a person: Active Directory's
// objectGUID survives renames and moves, a DN does not; directories
// without it are named by the DN.
func subject(entry *goldap.Entry) string {
	if g := entry.GetRawAttributeValue("objectGUID"); len(g) == 16 {
		return formatGUID(g)
	}
	return entry.DN
}

// formatGUID writes a 16-byte objectGUID the way Windows shows it: the
// first three fields are stored little-endian.
func formatGUID(b []byte) string {
	return fmt.Sprintf("%02x%02x%02x%02x-%02x%02x-%02x%02x-%x-%x",
		b[3], b[2], b[1], b[0], b[5], b[4], b[7], b[6], b[8:10], b[10:16])
}

// validUsername refuses what no directory name holds and what would only
// serve to probe: overlong names, invalid UTF-8, control characters.
func validUsername(user string) bool {
	if user == "" || len(user) > MaxUsername || !utf8.ValidString(user) {
		return false
	}
	return strings.IndexFunc(user, unicode.IsControl) < 0
}

// unavailable wraps a directory failure (ErrInvalid passes through); the
// context's end is named when that is what cut the sign-in short.
func unavailable(ctx context.Context, err error) error {
	if errors.Is(err, ErrInvalid) {
		return ErrInvalid
	}
	if ctx.Err() != nil {
		return fmt.Errorf("%w: %v (%v)", ErrUnavailable, err, ctx.Err())
	}
	return fmt.Errorf("%w: %v", ErrUnavailable, err)
}

// connect dials with the timeout, speaks TLS from the start (ldaps) or
// after StartTLS, and puts the context's deadline on the socket so that a
// server that stops answering mid-handshake cannot hold the sign-in.
func (a *Authenticator) connect(ctx context.Context) (*goldap.Conn, error) {
	port := a.url.Port()
	if port == "" {
		port = map[string]string{"ldaps": "636", "ldap": "389"}[a.url.Scheme]
	}
	addr := net.JoinHostPort(a.url.Hostname(), port)
	d := net.Dialer{Timeout: a.timeout}
	raw, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", addr, err)
	}
	if deadline, ok := ctx.Deadline(); ok {
		_ = raw.SetDeadline(deadline)
	}
	isTLS := a.url.Scheme == "ldaps"
	if isTLS {
		tc := tls.Client(raw, a.tls)
		hctx, cancel := context.WithTimeout(ctx, a.timeout)
		err := tc.HandshakeContext(hctx)
		cancel()
		if err != nil {
			raw.Close()
			return nil, fmt.Errorf("TLS with %s: %w", addr, err)
		}
		raw = tc
	}
	conn := goldap.NewConn(raw, isTLS)
	conn.Start()
	conn.SetTimeout(a.timeout)
	if a.cfg.StartTLS {
		if err := conn.StartTLS(a.tls); err != nil {
			conn.Close()
			return nil, fmt.Errorf("StartTLS with %s: %w", addr, err)
		}
	}
	return conn, nil
}

// serviceBind binds as the service account; without one the search runs
// anonymously.
func (a *Authenticator) serviceBind(conn *goldap.Conn) error {
	if a.cfg.BindDN == "" {
		return nil
	}
	return conn.Bind(a.cfg.BindDN, a.cfg.BindPassword.Value())
}

// findUser searches for the user's entry. Anything but exactly one entry
// is ErrInvalid, the same as a wrong password.
func (a *Authenticator) findUser(conn *goldap.Conn, user string) (*goldap.Entry, error) {
	filter := strings.ReplaceAll(a.cfg.UserFilter, "{username}", goldap.EscapeFilter(user))
	attrs := []string{a.cfg.EmailAttribute, a.cfg.NameAttribute, "objectGUID"}
	if a.cfg.GroupAttribute != "" {
		attrs = append(attrs, a.cfg.GroupAttribute)
	}
	req := goldap.NewSearchRequest(a.cfg.BaseDN, goldap.ScopeWholeSubtree, goldap.NeverDerefAliases,
		2, a.seconds(), false, filter, nonEmpty(attrs), nil)
	res, err := conn.Search(req)
	switch {
	case goldap.IsErrorWithCode(err, goldap.LDAPResultSizeLimitExceeded):
		return nil, ErrInvalid // several entries: ambiguous
	case err != nil:
		return nil, fmt.Errorf("search for the user: %w", err)
	case len(res.Entries) != 1:
		return nil, ErrInvalid
	}
	return res.Entries[0], nil
}

// groups are the DNs of the user's groups: read from group_attribute, or
// searched for with group_filter as the service account (the user may not
// be allowed to read groups).
func (a *Authenticator) groups(conn *goldap.Conn, entry *goldap.Entry) ([]string, error) {
	if a.cfg.GroupAttribute != "" {
		return entry.GetAttributeValues(a.cfg.GroupAttribute), nil
	}
	if err := a.serviceBind(conn); err != nil {
		return nil, fmt.Errorf("bind as %s for the group search: %w", a.cfg.BindDN, err)
	}
	base := a.cfg.GroupBaseDN
	if base == "" {
		base = a.cfg.BaseDN
	}
	filter := strings.ReplaceAll(a.cfg.GroupFilter, "{dn}", goldap.EscapeFilter(entry.DN))
	req := goldap.NewSearchRequest(base, goldap.ScopeWholeSubtree, goldap.NeverDerefAliases,
		0, a.seconds(), false, filter, []string{"1.1"}, nil)
	res, err := conn.Search(req)
	if err != nil {
		return nil, fmt.Errorf("search for the user's groups: %w", err)
	}
	groups := make([]string, 0, len(res.Entries))
	for _, e := range res.Entries {
		groups = append(groups, e.DN)
	}
	return groups, nil
}

// seconds is the timeout as the server's own time limit for a search.
func (a *Authenticator) seconds() int { return max(1, int(a.timeout/time.Second)) }

func nonEmpty(ss []string) []string {
	out := ss[:0]
	for _, s := range ss {
		if s != "" {
			out = append(out, s)
		}
	}
	return out
}
