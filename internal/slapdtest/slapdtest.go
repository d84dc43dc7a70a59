// Package slapdtest gives tests a real, throwaway OpenLDAP server: one slapd
// per test binary (cn=config and an mdb database in a temp dir, loopback
// ports for ldap:// and ldaps://, a certificate from a CA made for the run),
// and one fresh organizational unit per test so tests never see each other's
// entries. The memberof overlay keeps memberOf on users up to date.
//
// Use it from TestMain so the server is stopped when the tests end:
//
//	func TestMain(m *testing.M) { slapdtest.Main(m) }
//	func TestX(t *testing.T) { s := slapdtest.Start(t); ... }
package slapdtest

import (
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"fmt"
	"os"
	"sync"
	"testing"
)

// MissingBinary is the failure message when slapd is not installed.
const MissingBinary = "OpenLDAP slapd not found; install it with: apt-get install -y slapd"

// Suffix is the naming context of the server's one database.
const Suffix = "dc=example,dc=test"

// Server is the view of the shared slapd that one test gets.
type Server struct {
	URL          string // ldaps://127.0.0.1:PORT
	StartTLSURL  string // ldap://127.0.0.1:PORT, for StartTLS (plain until upgraded)
	CAFile       string // PEM of the CA that signed the server's certificate
	BindDN       string // the service account: may search the whole tree
	BindPassword string
	BaseDN       string // this test's own ou, empty at the start of the test
	Ports        [2]int // the ldap:// and ldaps:// ports

	tlsConfig *tls.Config
}

var shared struct {
	once sync.Once
	srv  *daemon
	err  error
	mu   sync.Mutex
}

// Start returns the shared server with a new, empty ou for this test. The
// server is started on first use; a missing slapd fails the test (never skips).
func Start(t testing.TB) *Server {
	t.Helper()
	shared.once.Do(func() {
		shared.mu.Lock()
		defer shared.mu.Unlock()
		// Should certificate generation fail the first test, later tests
		// still get an error instead of a nil server.
		shared.err = fmt.Errorf("slapdtest: start-up failed in an earlier test")
		shared.srv, shared.err = startDaemon(t)
	})
	if shared.err != nil {
		t.Fatal(shared.err)
	}
	d := shared.srv
	ou := "t" + randomHex(6)
	s := &Server{
		URL:          fmt.Sprintf("ldaps://127.0.0.1:%d", d.ldapsPort),
		StartTLSURL:  fmt.Sprintf("ldap://127.0.0.1:%d", d.ldapPort),
		CAFile:       d.caFile,
		BindDN:       d.rootDN,
		BindPassword: d.rootPW,
		BaseDN:       "ou=" + ou + "," + Suffix,
		Ports:        [2]int{d.ldapPort, d.ldapsPort},
		tlsConfig:    tlsConfig(d.caPool),
	}
	s.Add(t, s.BaseDN, map[string][]string{"objectClass": {"organizationalUnit"}, "ou": {ou}})
	return s
}

// Main runs the tests and then stops the shared server (if one was started).
func Main(m *testing.M) {
	code := m.Run()
	Stop()
	os.Exit(code)
}

// Stop stops the shared server and deletes its files.
func Stop() {
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if shared.srv != nil {
		shared.srv.stop()
		shared.srv = nil
	}
}

// Logs is the server's output so far (useful in a failure message).
func Logs() string {
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if shared.srv == nil {
		return ""
	}
	return shared.srv.logs.String()
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
