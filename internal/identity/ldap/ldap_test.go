package ldap

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/config"
	"github.com/simpletuner/simpletuner-orchestration/internal/slapdtest"
)

func TestMain(m *testing.M) { slapdtest.Main(m) }

// directory is a test's ou with two users and a group holding alice.
type directory struct {
	s          *slapdtest.Server
	alice, bob string // DNs
	group      string
}

func newDirectory(t *testing.T) directory {
	t.Helper()
	s := slapdtest.Start(t)
	d := directory{s: s}
	d.alice = s.AddUser(t, "alice", "wonder land", "Alice Liddell", "alice@example.test")
	d.bob = s.AddUser(t, "admin", "bobs-password", "Bob Admin", "bob@example.test")
	d.group = s.AddGroup(t, "trainers", d.alice)
	s.AddGroup(t, "others", d.bob)
	return d
}

func (d directory) config() config.LDAPConfig {
	c := config.DefaultOrchestrator().Auth.LDAP
	c.URL, c.CAFile, c.BaseDN = d.s.URL, d.s.CAFile, d.s.BaseDN
	c.BindDN, c.BindPassword = d.s.BindDN, config.Secret(d.s.BindPassword)
	return c
}

func newAuth(t *testing.T, c config.LDAPConfig) *Authenticator {
	t.Helper()
	a, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func TestGoodLoginWithGroupSearch(t *testing.T) {
	t.Parallel()
	d := newDirectory(t)
	a := newAuth(t, d.config())
	r, err := a.Authenticate(context.Background(), "alice", "wonder land")
	if err != nil {
		t.Fatalf("%v\n%s", err, slapdtest.Logs())
	}
	if r.Provider != "ldap" || r.Issuer != "ldap:"+d.s.URL || r.Subject != d.alice || r.Username != "alice" ||
		r.Email != "alice@example.test" || r.Name != "Alice Liddell" {
		t.Errorf("result: %+v", r)
	}
	if !slices.Equal(r.Groups, []string{d.group}) {
		t.Errorf("groups = %q, want [%q]", r.Groups, d.group)
	}
}

// With group_attribute = "memberOf" the groups come from the user's entry
// (kept by the memberof overlay, as Active Directory keeps it).
func TestGoodLoginWithMemberOf(t *testing.T) {
	t.Parallel()
	d := newDirectory(t)
	c := d.config()
	c.GroupAttribute = "memberOf"
	c.GroupFilter = ""
	r, err := newAuth(t, c).Authenticate(context.Background(), "alice", "wonder land")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(r.Groups, []string{d.group}) {
		t.Errorf("groups = %q, want [%q]", r.Groups, d.group)
	}
}

func TestStartTLS(t *testing.T) {
	t.Parallel()
	d := newDirectory(t)
	c := d.config()
	c.URL, c.StartTLS = d.s.StartTLSURL, true
	r, err := newAuth(t, c).Authenticate(context.Background(), "alice", "wonder land")
	if err != nil || r.Subject != d.alice {
		t.Fatalf("StartTLS sign-in: %+v %v", r, err)
	}
}

// Plain LDAP would send the password in clear: refused before any use.
func TestPlainLDAPRefused(t *testing.T) {
	t.Parallel()
	c := config.DefaultOrchestrator().Auth.LDAP
	c.URL, c.BaseDN = "ldap://127.0.0.1:389", "dc=example,dc=test"
	if _, err := New(c); err == nil || !strings.Contains(err.Error(), "plain LDAP") {
		t.Fatalf("New(ldap:// without start_tls) = %v", err)
	}
}

// Every credential problem reads the same, and never carries the password.
func TestInvalidCredentials(t *testing.T) {
	t.Parallel()
	d := newDirectory(t)
	c := d.config()
	// A second entry with Alice's name makes a cn search ambiguous.
	d.s.AddUser(t, "alice2", "x", "Alice Liddell", "")
	a := newAuth(t, c)
	byCN := d.config()
	byCN.UserFilter = "(cn={username})"
	ambiguous := newAuth(t, byCN)
	for _, tc := range []struct {
		name, user, pass string
		a                *Authenticator
	}{
		{"wrong password", "alice", "wonder-land", a},
		{"empty password", "alice", "", a},
		{"unknown user", "carol", "wonder land", a},
		{"wildcard injection", "*)(uid=*", "wonder land", a},
		{"or injection", "admin)(|(uid=*", "bobs-password", a},
		{"star", "*", "wonder land", a},
		{"NUL in name", "alice\x00", "wonder land", a},
		{"newline in name", "alice\n", "wonder land", a},
		{"overlong name", strings.Repeat("a", MaxUsername+1), "wonder land", a},
		{"invalid UTF-8", "alice\xff", "wonder land", a},
		{"two entries match", "Alice Liddell", "wonder land", ambiguous},
	} {
		_, err := tc.a.Authenticate(context.Background(), tc.user, tc.pass)
		if !errors.Is(err, ErrInvalid) || err.Error() != "invalid user name or password" {
			t.Errorf("%s: err = %v, want exactly %q", tc.name, err, ErrInvalid)
		}
		if err != nil && tc.pass != "" && strings.Contains(err.Error(), tc.pass) {
			t.Errorf("%s: the error holds the password: %v", tc.name, err)
		}
	}
	// The right password still works afterwards (nothing was locked).
	if _, err := a.Authenticate(context.Background(), "alice", "wonder land"); err != nil {
		t.Fatal(err)
	}
}

// A wrong service password is the directory's problem, not the user's; the
// error names the bind DN but not either password.
func TestWrongServicePassword(t *testing.T) {
	t.Parallel()
	d := newDirectory(t)
	c := d.config()
	c.BindPassword = "not-the-service-password"
	_, err := newAuth(t, c).Authenticate(context.Background(), "alice", "wonder land")
	if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), d.s.BindDN) {
		t.Fatalf("err = %v", err)
	}
	if strings.Contains(err.Error(), "not-the-service-password") || strings.Contains(err.Error(), "wonder land") {
		t.Fatalf("a password in the error: %v", err)
	}
}

// A port nobody listens on fails at once as unavailable.
func TestServerDown(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	c := config.DefaultOrchestrator().Auth.LDAP
	c.URL, c.BaseDN = "ldaps://"+addr, "dc=example,dc=test"
	_, err = newAuth(t, c).Authenticate(context.Background(), "alice", "wonder land")
	if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "refused") {
		t.Fatalf("err = %v", err)
	}
	if strings.Contains(err.Error(), "wonder land") {
		t.Fatalf("the password in the error: %v", err)
	}
}

// silentServer accepts connections and never answers; accepted receives
// each connection as it arrives.
func silentServer(t *testing.T) (addr string, accepted chan net.Conn) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	accepted = make(chan net.Conn, 16)
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			accepted <- c
		}
	}()
	t.Cleanup(func() {
		l.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return l.Addr().String(), accepted
}

// A server that accepts and never answers costs a sign-in a few timeouts,
// over ldaps (stuck in the TLS handshake) and StartTLS (stuck waiting for
// the StartTLS answer).
func TestSlowServerTimesOut(t *testing.T) {
	t.Parallel()
	addr, _ := silentServer(t)
	for _, tc := range []struct {
		url      string
		startTLS bool
	}{{"ldaps://" + addr, false}, {"ldap://" + addr, true}} {
		c := config.DefaultOrchestrator().Auth.LDAP
		c.URL, c.StartTLS, c.BaseDN = tc.url, tc.startTLS, "dc=example,dc=test"
		c.Timeout = config.D(200 * time.Millisecond)
		start := time.Now()
		_, err := newAuth(t, c).Authenticate(context.Background(), "alice", "wonder land")
		took := time.Since(start)
		if !errors.Is(err, ErrUnavailable) {
			t.Errorf("%s: err = %v", tc.url, err)
		}
		// The bound is 6 timeouts (1.2s); allow a loaded machine slack.
		if took > 10*time.Second {
			t.Errorf("%s: took %v with a 200ms timeout", tc.url, took)
		}
	}
}

// max_concurrent sign-ins in flight: the next one is refused at once as
// busy, and a slot frees when a sign-in ends (here: its context ends).
func TestSaturationIsBusy(t *testing.T) {
	t.Parallel()
	addr, accepted := silentServer(t)
	c := config.DefaultOrchestrator().Auth.LDAP
	c.URL, c.BaseDN, c.MaxConcurrent = "ldaps://"+addr, "dc=example,dc=test", 2
	c.Timeout = config.D(time.Minute)
	a := newAuth(t, c)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, c.MaxConcurrent)
	for range c.MaxConcurrent {
		go func() { _, err := a.Authenticate(ctx, "alice", "wonder land"); done <- err }()
	}
	// A connection arrives only after its sign-in took a slot.
	for range c.MaxConcurrent {
		<-accepted
	}
	if _, err := a.Authenticate(context.Background(), "bob", "pw"); !errors.Is(err, ErrBusy) {
		t.Fatalf("sign-in %d: err = %v, want ErrBusy", c.MaxConcurrent+1, err)
	}
	cancel()
	for range c.MaxConcurrent {
		if err := <-done; !errors.Is(err, ErrUnavailable) {
			t.Errorf("cancelled sign-in: %v", err)
		}
	}
	// The slots are free again: the next sign-in reaches the server.
	c2, cancel2 := context.WithCancel(context.Background())
	defer cancel2()
	go func() { _, err := a.Authenticate(c2, "alice", "wonder land"); done <- err }()
	select {
	case <-accepted:
	case err := <-done:
		t.Fatalf("after the slots freed: %v", err)
	}
	cancel2()
	<-done
}

func ExampleAuthenticator_Authenticate() {
	c := config.DefaultOrchestrator().Auth.LDAP
	c.URL = "ldaps://dc.example.com:636"
	c.BaseDN = "dc=example,dc=com"
	c.UserFilter = "(sAMAccountName={username})"
	c.GroupAttribute = "memberOf"
	a, err := New(c)
	fmt.Println(a.Issuer(), err)
	// Output: ldap:ldaps://dc.example.com:636 <nil>
}

// group_base_dn limits the group search: a group outside it is not read.
func TestGroupBaseDN(t *testing.T) {
	t.Parallel()
	d := newDirectory(t)
	groups := "ou=groups," + d.s.BaseDN
	d.s.Add(t, groups, map[string][]string{"objectClass": {"organizationalUnit"}, "ou": {"groups"}})
	inside := "cn=ml," + groups
	d.s.Add(t, inside, map[string][]string{"objectClass": {"groupOfNames"}, "cn": {"ml"}, "member": {d.alice}})
	c := d.config()
	c.GroupBaseDN = groups
	r, err := newAuth(t, c).Authenticate(context.Background(), "alice", "wonder land")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(r.Groups, []string{inside}) {
		t.Errorf("groups = %q, want only %q (not %q)", r.Groups, inside, d.group)
	}
}

// Spraying passwords at one name is slowed: once the name has used up its
// failures, even the right password is refused without asking the
// directory, in any letter case, while other names still sign in.
func TestFailuresThrottleOneName(t *testing.T) {
	t.Parallel()
	d := newDirectory(t)
	a := newAuth(t, d.config())
	ctx := context.Background()
	for i := range 10 {
		if _, err := a.Authenticate(ctx, "alice", fmt.Sprintf("guess-%d", i)); !errors.Is(err, ErrInvalid) {
			t.Fatalf("guess %d: err = %v", i, err)
		}
	}
	for _, name := range []string{"alice", "ALICE"} {
		_, err := a.Authenticate(ctx, name, "wonder land")
		if !errors.Is(err, ErrThrottled) || strings.Contains(err.Error(), "wonder land") {
			t.Fatalf("%s after 10 failures: err = %v, want ErrThrottled", name, err)
		}
	}
	if _, err := a.Authenticate(ctx, "admin", "bobs-password"); err != nil {
		t.Fatalf("another name: %v", err)
	}
}

func TestFormatGUID(t *testing.T) {
	b := []byte{0x33, 0x22, 0x11, 0x00, 0x55, 0x44, 0x77, 0x66, 0x88, 0x99, 0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0xff}
	if got, want := formatGUID(b), "00112233-4455-6677-8899-aabbccddeeff"; got != want {
		t.Fatalf("formatGUID = %s, want %s", got, want)
	}
}
