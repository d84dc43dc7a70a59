// Package ctlconf reads simpletunerctl's per-user settings,
// ~/.config/simpletuner/ctl.toml: where the orchestrator is and the admin
// token. The file may hold a token, so one that anybody but its owner can
// read or write is refused rather than used.
package ctlconf

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/BurntSushi/toml"
)

// File is the content of ctl.toml. Every key is optional; command-line flags
// and environment variables win over it.
type File struct {
	Path      string // where it was read from
	URL       string // url = "https://orchestrator:8001" or "unix:///run/…"
	Token     string // token = "sta_…"
	TokenFile string // token_file = "/path"; relative paths are relative to the file
	CAFile    string // ca_file
	CertFile  string // cert_file
	KeyFile   string // key_file
}

// Keys lists the keys ctl.toml accepts, for the man page test and messages.
func Keys() []string {
	return []string{"url", "token", "token_file", "ca_file", "cert_file", "key_file"}
}

// DefaultPath is $XDG_CONFIG_HOME/simpletuner/ctl.toml, else
// $HOME/.config/simpletuner/ctl.toml; "" when neither is set.
func DefaultPath(getenv func(string) string) string {
	if x := getenv("XDG_CONFIG_HOME"); x != "" && filepath.IsAbs(x) {
		return filepath.Join(x, "simpletuner", "ctl.toml")
	}
	if h := getenv("HOME"); h != "" {
		return filepath.Join(h, ".config", "simpletuner", "ctl.toml")
	}
	return ""
}

// Load reads the file at path. A missing file is not an error: it returns
// (nil, nil).
func Load(path string) (*File, error) {
	if path == "" {
		return nil, nil
	}
	data, found, err := readPrivate(path, "an admin token")
	if !found || err != nil {
		return nil, err
	}
	return Parse(path, data)
}

// readPrivate reads a file that may hold tokens (holds says what): a
// regular file that no one but its owner may read, of at most 1 MiB.
// found is false when there is no such file.
func readPrivate(path, holds string) (data []byte, found bool, err error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("%s: %w", path, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, false, fmt.Errorf("%s: %w", path, err)
	}
	if !fi.Mode().IsRegular() {
		return nil, false, fmt.Errorf("%s is not a regular file", path)
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return nil, false, fmt.Errorf("%s is accessible by group or others (mode %04o) and may hold %s; "+
			"refusing to use it: run chmod 600 %s", path, perm, holds, path)
	}
	data, err = io.ReadAll(io.LimitReader(f, 1<<20+1))
	if err != nil {
		return nil, false, fmt.Errorf("%s: %w", path, err)
	}
	if len(data) > 1<<20 {
		return nil, false, fmt.Errorf("%s is larger than 1 MiB; it is not a simpletunerctl file", path)
	}
	return data, true, nil
}

// Parse decodes ctl.toml content; errors name the file and line.
func Parse(path string, data []byte) (*File, error) {
	var raw map[string]any
	if _, err := toml.Decode(string(data), &raw); err != nil {
		var pe toml.ParseError
		if errors.As(err, &pe) {
			return nil, fmt.Errorf("%s:%d: %s", path, pe.Position.Line, pe.Message)
		}
		return nil, fmt.Errorf("%s: %v", path, err)
	}
	out := &File{Path: path}
	fields := map[string]*string{
		"url": &out.URL, "token": &out.Token, "token_file": &out.TokenFile,
		"ca_file": &out.CAFile, "cert_file": &out.CertFile, "key_file": &out.KeyFile,
	}
	var problems []string
	keys := make([]string, 0, len(raw))
	for k := range raw {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		dst, ok := fields[k]
		if !ok {
			problems = append(problems, fmt.Sprintf("%s:%d: unknown key %q (known: %s)", path, keyLine(data, k), k, strings.Join(Keys(), ", ")))
			continue
		}
		s, ok := raw[k].(string)
		if !ok {
			problems = append(problems, fmt.Sprintf("%s:%d: key %s must be a string", path, keyLine(data, k), k))
			continue
		}
		*dst = strings.TrimSpace(s)
	}
	if len(problems) > 0 {
		return nil, errors.New(strings.Join(problems, "\n"))
	}
	if out.TokenFile != "" && !filepath.IsAbs(out.TokenFile) {
		out.TokenFile = filepath.Join(filepath.Dir(path), out.TokenFile)
	}
	return out, nil
}

// keyLine finds the line that sets a top-level key (0 when not found, e.g.
// for a table header).
func keyLine(data []byte, key string) int {
	for i, line := range strings.Split(string(data), "\n") {
		s := strings.TrimSpace(line)
		if strings.HasPrefix(s, "[") {
			name := strings.Trim(s, "[] \t")
			if strings.Trim(name, `"'`) == key {
				return i + 1
			}
			continue
		}
		k, _, ok := strings.Cut(s, "=")
		if ok && strings.Trim(strings.TrimSpace(k), `"'`) == key {
			return i + 1
		}
	}
	return 0
}
