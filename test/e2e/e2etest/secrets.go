package e2etest

import (
	"crypto/rand"
	"encoding/hex"
	"strings"
	"sync"
	"testing"
)

// Every secret the harness hands out or sees (worker, admin and upload
// tokens, hf_token values) is noted here, and everything the daemons say is
// scanned for them: their logs (the daemons run at debug level), the metrics
// page, every audit row and every error body. A secret may appear only in
// the one-time reply that creates it.

var secrets = struct {
	sync.Mutex
	kind   map[string]string   // value → what it is
	byHead map[string][]string // a value's first minSecretBody bytes → values
}{kind: map[string]string{}, byHead: map[string][]string{}}

// minSecretBody is the shortest part of a secret worth scanning for on its
// own (a token's random part without its prefix).
const minSecretBody = 16

// NoteSecret records a secret the daemons must never print.
func NoteSecret(kind, value string) {
	if len(value) < minSecretBody {
		return
	}
	secrets.Lock()
	defer secrets.Unlock()
	add := func(v, kind string) {
		if _, ok := secrets.kind[v]; ok {
			return
		}
		secrets.kind[v] = kind
		head := v[:minSecretBody]
		secrets.byHead[head] = append(secrets.byHead[head], v)
	}
	add(value, kind)
	// A token's random part alone is as good as the token.
	if _, body, ok := strings.Cut(value, "_"); ok && len(body) >= minSecretBody {
		add(body, kind+" (without its prefix)")
	}
}

// NewHFToken returns a fresh hf_token value and notes it.
func NewHFToken() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	v := "hf_" + hex.EncodeToString(b)
	NoteSecret("hf_token", v)
	return v
}

// SecretHit is where a scan found a secret; it never holds the secret.
type SecretHit struct {
	Kind, Where string
	Line        int
	Context     string // the line, the secret replaced by [SECRET]
}

// tokenByte is a byte that may be part of a token, a hex or a base64url string.
func tokenByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-'
}

// FindSecret returns the first noted secret in text, if any. It looks at
// every place a token could begin (where a run of token bytes starts, or
// after a '_' or '-' inside one), so its cost grows with the text, not with
// the number of secrets.
func FindSecret(where, text string) (SecretHit, bool) {
	secrets.Lock()
	defer secrets.Unlock()
	for i := 0; i+minSecretBody <= len(text); i++ {
		if i > 0 {
			if c := text[i-1]; tokenByte(c) && c != '_' && c != '-' {
				continue
			}
		}
		for _, v := range secrets.byHead[text[i:i+minSecretBody]] {
			if strings.HasPrefix(text[i:], v) {
				return secretHit(where, text, i, secrets.kind[v]), true
			}
		}
	}
	return SecretHit{}, false
}

// secretHit describes a secret found at text[at:]; secrets is locked.
func secretHit(where, text string, at int, kind string) SecretHit {
	start := strings.LastIndexByte(text[:at], '\n') + 1
	end := strings.IndexByte(text[at:], '\n')
	if end < 0 {
		end = len(text)
	} else {
		end += at
	}
	ctx := text[start:end]
	if len(ctx) > 2000 {
		ctx = ctx[:2000]
	}
	for other := range secrets.kind {
		ctx = strings.ReplaceAll(ctx, other, "[SECRET]")
	}
	if len(ctx) > 300 {
		ctx = ctx[:300] + "…"
	}
	return SecretHit{Kind: kind, Where: where, Line: strings.Count(text[:at], "\n") + 1, Context: ctx}
}

// ScanForSecrets fails t at the first secret found in text.
func ScanForSecrets(t testing.TB, where, text string) bool {
	t.Helper()
	if hit, found := FindSecret(where, text); found {
		t.Errorf("SECRET LEAK: a %s appears in %s, line %d: %s", hit.Kind, hit.Where, hit.Line, hit.Context)
		return true
	}
	return false
}
