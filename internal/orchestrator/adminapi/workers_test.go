package adminapi

import (
	"net/url"
	"strings"
	"testing"
)

func TestValidHostPort(t *testing.T) {
	t.Parallel()
	for hp, want := range map[string]bool{
		"example.com": true, "example.com:8001": true, "10.1.2.3:1": true, "[::1]:8001": true, "[::1]": true,
		"a-b.c": true, "": false, "::1": false, "[::1%eth0]:1": false, "10.1.2.3:0": false, "x:65536": false,
		"x:08": false, "-a.b": false, "a..b": false, "a b": false, "a/b": false, "$(id)": false, "[10.0.0.1]:1": false,
	} {
		if got := validHostPort(hp); got != want {
			t.Errorf("validHostPort(%q) = %v; want %v", hp, got, want)
		}
	}
}

// The Host header is the client's: what validHostPort accepts must be a
// plain authority that a URL keeps as it is and a shell has nothing to
// expand in.
func FuzzValidHostPort(f *testing.F) {
	for _, s := range []string{"example.com:8001", "[::1]:1", "10.0.0.1", "$(id)", "a b", "[::1%25x]:1", "h:0"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, hp string) {
		if !validHostPort(hp) {
			return
		}
		if strings.ContainsAny(hp, " \t\r\n$`;&|<>()'\"\\*?{}!#~/@%") {
			t.Fatalf("accepted %q", hp)
		}
		u, err := url.Parse("http://" + hp)
		word := "http://" + hp
		if q := shellQuote(word); err != nil || u.Host != hp || (q != word && q != "'"+word+"'") {
			t.Fatalf("accepted %q, which does not survive a URL or a shell (%v)", hp, err)
		}
	})
}
