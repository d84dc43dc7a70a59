package ctlconf

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/BurntSushi/toml"
)

// Login is what simpletunerctl login left for one orchestrator: a
// short-lived token acting as the person, and what renewing it takes.
type Login struct {
	URL       string    `toml:"url"`
	Token     string    `toml:"token"`
	TokenID   string    `toml:"token_id"`
	ExpiresAt time.Time `toml:"expires_at"`
	// Provider is "oidc" or "ldap"; Issuer and ClientID the OpenID
	// provider and public client signed in with; RefreshToken the
	// provider's, when it gave one; Username the directory user name.
	Provider     string `toml:"provider"`
	Issuer       string `toml:"issuer,omitempty"`
	ClientID     string `toml:"client_id,omitempty"`
	RefreshToken string `toml:"refresh_token,omitempty"`
	Username     string `toml:"username,omitempty"`
	// Person is who the token stands for, for messages.
	Person string `toml:"person,omitempty"`
}

// Logins is login.toml: one entry per orchestrator URL.
type Logins struct {
	Path   string  `toml:"-"`
	Logins []Login `toml:"login"`
}

// DefaultLoginPath is login.toml beside ctl.toml; "" when neither
// XDG_CONFIG_HOME nor HOME is set.
func DefaultLoginPath(getenv func(string) string) string {
	p := DefaultPath(getenv)
	if p == "" {
		return ""
	}
	return filepath.Join(filepath.Dir(p), "login.toml")
}

// LoadLogins reads login.toml; a missing file is an empty one. Like
// ctl.toml it holds tokens, so a file others may read is refused.
func LoadLogins(path string) (*Logins, error) {
	out := &Logins{Path: path}
	if path == "" {
		return out, nil
	}
	data, found, err := readPrivate(path, "login tokens")
	if err != nil {
		return nil, err
	}
	if !found {
		return out, nil
	}
	if _, err := toml.Decode(string(data), out); err != nil {
		return nil, fmt.Errorf("%s: %v (delete it and run simpletunerctl login again)", path, err)
	}
	return out, nil
}

// Find is the login for url, nil when there is none.
func (l *Logins) Find(url string) *Login {
	for i := range l.Logins {
		if sameURL(l.Logins[i].URL, url) {
			return &l.Logins[i]
		}
	}
	return nil
}

// Put replaces the login for its URL, or adds it.
func (l *Logins) Put(in Login) {
	if cur := l.Find(in.URL); cur != nil {
		*cur = in
		return
	}
	l.Logins = append(l.Logins, in)
}

// Remove drops the login for url; it reports whether there was one.
func (l *Logins) Remove(url string) bool {
	n := len(l.Logins)
	l.Logins = slices.DeleteFunc(l.Logins, func(e Login) bool { return sameURL(e.URL, url) })
	return len(l.Logins) != n
}

func sameURL(a, b string) bool {
	return strings.TrimSuffix(a, "/") == strings.TrimSuffix(b, "/")
}

// Save writes the file with mode 0600: a new file beside it, renamed over
// it, so a reader never sees half of it.
func (l *Logins) Save() error {
	if l.Path == "" {
		return errors.New("nowhere to keep the login: set HOME or XDG_CONFIG_HOME")
	}
	if err := os.MkdirAll(filepath.Dir(l.Path), 0o700); err != nil {
		return err
	}
	var buf bytes.Buffer
	buf.WriteString("# Written by simpletunerctl login; holds tokens. Remove an entry with simpletunerctl logout.\n")
	if err := toml.NewEncoder(&buf).Encode(l); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(l.Path), ".login.toml-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return err
	}
	if _, err := tmp.Write(buf.Bytes()); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), l.Path)
}
