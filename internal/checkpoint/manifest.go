package checkpoint

import (
	"encoding/json"
	"fmt"
	"path"
	"strings"

	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
)

// Limits of a commit: a checkpoint of more files than MaxFiles is refused,
// as is a keep count above MaxKeep.
const (
	MaxFiles = 100_000
	MaxKeep  = 100
)

// ValidateCommit checks a commit's shape: a checkpoint name, the step it
// names, at least one file, each path relative and clean, no path twice and
// none inside another, sizes not negative, SHA-256 as 64 lowercase hex
// digits, and keep from 1 to MaxKeep. Whether each path is a name the
// artifact store accepts is the store's to say.
func ValidateCommit(c protocol.CheckpointCommit) error {
	d, ok := Parse(c.Name)
	if !ok {
		return fmt.Errorf("name %q is not a checkpoint name (checkpoint-<step> or checkpoint-<step>-<suffix>)", c.Name)
	}
	if d.Step != c.Step {
		return fmt.Errorf("step %d does not match the name %s", c.Step, c.Name)
	}
	if c.Keep < 1 || c.Keep > MaxKeep {
		return fmt.Errorf("keep must be from 1 to %d; got %d", MaxKeep, c.Keep)
	}
	if len(c.Files) == 0 {
		return fmt.Errorf("checkpoint %s lists no file", c.Name)
	}
	if len(c.Files) > MaxFiles {
		return fmt.Errorf("checkpoint %s lists %d files; at most %d are kept", c.Name, len(c.Files), MaxFiles)
	}
	paths := make(map[string]bool, len(c.Files))
	for _, f := range c.Files {
		if err := validPath(f.Path); err != nil {
			return fmt.Errorf("file %q: %w", f.Path, err)
		}
		if paths[f.Path] {
			return fmt.Errorf("file %q is listed twice", f.Path)
		}
		paths[f.Path] = true
		if f.Size < 0 {
			return fmt.Errorf("file %q: negative size", f.Path)
		}
		if !isSHA256(f.SHA256) {
			return fmt.Errorf("file %q: sha256 must be 64 lowercase hex digits", f.Path)
		}
	}
	for p := range paths {
		for dir := path.Dir(p); dir != "."; dir = path.Dir(dir) {
			if paths[dir] {
				return fmt.Errorf("file %q lies inside the file %q", p, dir)
			}
		}
	}
	return nil
}

// validPath accepts a slash-separated relative path without empty, "." or
// ".." segments, backslashes or control characters.
func validPath(p string) error {
	if p == "" || strings.HasPrefix(p, "/") {
		return fmt.Errorf("must be a relative path")
	}
	for _, seg := range strings.Split(p, "/") {
		if seg == "" || seg == "." || seg == ".." {
			return fmt.Errorf("empty, \".\" or \"..\" segment")
		}
	}
	for _, r := range p {
		if r < 0x20 || r == 0x7f || r == '\\' {
			return fmt.Errorf("control character or backslash")
		}
	}
	return nil
}

func isSHA256(s string) bool {
	if len(s) != 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// DecodeCommit reads a commit from JSON and validates it.
func DecodeCommit(b []byte) (protocol.CheckpointCommit, error) {
	var c protocol.CheckpointCommit
	if err := json.Unmarshal(b, &c); err != nil {
		return c, err
	}
	return c, ValidateCommit(c)
}

// Bytes is the size of all of a checkpoint's files.
func Bytes(files []protocol.CheckpointFile) int64 {
	var n int64
	for _, f := range files {
		n += f.Size
	}
	return n
}
