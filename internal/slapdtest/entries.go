package slapdtest

import (
	"crypto/tls"
	"crypto/x509"
	"sort"
	"testing"
	"time"

	"github.com/go-ldap/ldap/v3"
)

func tlsConfig(pool *x509.CertPool) *tls.Config {
	return &tls.Config{RootCAs: pool, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12}
}

// TLSConfig trusts the server's CA.
func (s *Server) TLSConfig() *tls.Config { return s.tlsConfig.Clone() }

// Conn is a connection bound as the service account; closed when the test ends.
func (s *Server) Conn(t testing.TB) *ldap.Conn {
	t.Helper()
	conn, err := ldap.DialURL(s.URL, ldap.DialWithTLSConfig(s.TLSConfig()))
	if err != nil {
		t.Fatalf("slapdtest: dial %s: %v", s.URL, err)
	}
	t.Cleanup(func() { conn.Close() })
	conn.SetTimeout(10 * time.Second)
	if err := conn.Bind(s.BindDN, s.BindPassword); err != nil {
		t.Fatalf("slapdtest: bind as %s: %v", s.BindDN, err)
	}
	return conn
}

// Add creates one entry.
func (s *Server) Add(t testing.TB, dn string, attrs map[string][]string) {
	t.Helper()
	req := ldap.NewAddRequest(dn, nil)
	names := make([]string, 0, len(attrs))
	for k := range attrs {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		req.Attribute(k, attrs[k])
	}
	if err := s.Conn(t).Add(req); err != nil {
		t.Fatalf("slapdtest: add %s: %v", dn, err)
	}
}

// AddUser creates an inetOrgPerson uid=<uid> in the test's ou with the given
// password (stored as is: slapd compares it on bind) and returns its DN.
func (s *Server) AddUser(t testing.TB, uid, password, name, email string) string {
	t.Helper()
	dn := "uid=" + ldap.EscapeDN(uid) + "," + s.BaseDN
	attrs := map[string][]string{
		"objectClass":  {"inetOrgPerson"},
		"uid":          {uid},
		"cn":           {name},
		"sn":           {name},
		"userPassword": {password},
	}
	if email != "" {
		attrs["mail"] = []string{email}
	}
	s.Add(t, dn, attrs)
	return dn
}

// AddGroup creates a groupOfNames cn=<cn> in the test's ou with the given
// member DNs (the memberof overlay then sets memberOf on each) and returns
// its DN.
func (s *Server) AddGroup(t testing.TB, cn string, members ...string) string {
	t.Helper()
	dn := "cn=" + ldap.EscapeDN(cn) + "," + s.BaseDN
	s.Add(t, dn, map[string][]string{"objectClass": {"groupOfNames"}, "cn": {cn}, "member": members})
	return dn
}
