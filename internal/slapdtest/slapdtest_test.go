package slapdtest

import (
	"testing"

	"github.com/go-ldap/ldap/v3"
)

func TestMain(m *testing.M) { Main(m) }

// A user added to a group can bind with its password, and the memberof
// overlay shows the group on the user.
func TestUserGroupAndBind(t *testing.T) {
	s := Start(t)
	dn := s.AddUser(t, "alice", "wonderland", "Alice", "alice@example.test")
	group := s.AddGroup(t, "trainers", dn)

	conn, err := ldap.DialURL(s.URL, ldap.DialWithTLSConfig(s.TLSConfig()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if err := conn.Bind(dn, "wonderland"); err != nil {
		t.Fatalf("bind as alice: %v", err)
	}
	res, err := conn.Search(ldap.NewSearchRequest(dn, ldap.ScopeBaseObject, ldap.NeverDerefAliases, 0, 0, false,
		"(objectClass=*)", []string{"memberOf"}, nil))
	if err != nil {
		t.Fatal(err)
	}
	if got := res.Entries[0].GetAttributeValues("memberOf"); len(got) != 1 || got[0] != group {
		t.Fatalf("memberOf = %q, want [%q]\n%s", got, group, Logs())
	}
}

// StartTLS on the plain port upgrades to the same certificate.
func TestStartTLS(t *testing.T) {
	s := Start(t)
	conn, err := ldap.DialURL(s.StartTLSURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if err := conn.StartTLS(s.TLSConfig()); err != nil {
		t.Fatalf("StartTLS: %v", err)
	}
	if err := conn.Bind(s.BindDN, s.BindPassword); err != nil {
		t.Fatal(err)
	}
}

// Every test gets its own empty ou.
func TestOUPerTest(t *testing.T) {
	a, b := Start(t), Start(t)
	if a.BaseDN == b.BaseDN {
		t.Fatalf("two tests share %s", a.BaseDN)
	}
	a.AddUser(t, "bob", "pw", "Bob", "")
	res, err := b.Conn(t).Search(ldap.NewSearchRequest(b.BaseDN, ldap.ScopeWholeSubtree, ldap.NeverDerefAliases, 0, 0, false,
		"(uid=bob)", nil, nil))
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Entries) != 0 {
		t.Fatalf("bob seen under %s", b.BaseDN)
	}
}

// Without slapd the error says how to install it.
func TestMissingBinary(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	if _, _, err := binaries(t.TempDir()); err == nil || err.Error() != MissingBinary {
		t.Fatalf("err = %v, want %q", err, MissingBinary)
	}
	if _, _, err := binaries("/usr/sbin"); err != nil {
		t.Fatalf("installed slapd not found: %v", err)
	}
}
