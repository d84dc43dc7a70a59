package ctlconf

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Logins are kept per URL (a trailing slash is the same URL), saved with
// mode 0600 and read back as written; removing one keeps the others.
func TestLoginsRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "simpletuner", "login.toml")
	l, err := LoadLogins(path)
	if err != nil || len(l.Logins) != 0 {
		t.Fatalf("a missing file: %+v %v", l, err)
	}
	at := time.Date(2026, 11, 29, 16, 0, 0, 0, time.UTC)
	l.Put(Login{URL: "https://a.example.com", Token: "sta_a", ExpiresAt: at, Provider: "oidc", RefreshToken: "r1"})
	l.Put(Login{URL: "https://b.example.com", Token: "sta_b", ExpiresAt: at, Provider: "ldap", Username: "alice"})
	l.Put(Login{URL: "https://a.example.com/", Token: "sta_a2", ExpiresAt: at.Add(time.Hour), Provider: "oidc"})
	if err := l.Save(); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("mode: %v %v", fi, err)
	}
	got, err := LoadLogins(path)
	if err != nil || len(got.Logins) != 2 {
		t.Fatalf("read back: %+v %v", got, err)
	}
	if a := got.Find("https://a.example.com/"); a == nil || a.Token != "sta_a2" || !a.ExpiresAt.Equal(at.Add(time.Hour)) || a.RefreshToken != "" {
		t.Fatalf("a: %+v", a)
	}
	if !got.Remove("https://b.example.com") || got.Remove("https://b.example.com") || got.Find("https://a.example.com") == nil {
		t.Fatalf("remove: %+v", got.Logins)
	}
	entries, _ := os.ReadDir(filepath.Dir(path))
	if len(entries) != 1 {
		t.Fatalf("left behind: %v", entries)
	}
}

// login.toml holds tokens: a file others may read is refused with the fix.
func TestLoginsRefusesReadableByOthers(t *testing.T) {
	p := write(t, "", 0o644)
	_, err := LoadLogins(p)
	if err == nil || !strings.Contains(err.Error(), "chmod 600 "+p) {
		t.Fatalf("got %v", err)
	}
}
