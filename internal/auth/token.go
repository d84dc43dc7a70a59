package auth

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"log/slog"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Token prefixes and the shape of the part after them.
const (
	WorkerPrefix = "wt_"
	AdminPrefix  = "sta_"

	BodyLen     = 43 // 32 random bytes, unpadded base64url
	ChecksumLen = 6  // CRC-32 of prefix+body in base62

	secretBytes = 32
	accessorLen = 8
)

const (
	b64Alphabet    = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	base62Alphabet = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
)

// NewWorkerToken returns a fresh worker token ("wt_…").
func NewWorkerToken() string { return newToken(WorkerPrefix) }

// NewAdminToken returns a fresh admin token ("sta_…").
func NewAdminToken() string { return newToken(AdminPrefix) }

func newToken(prefix string) string {
	var secret [secretBytes]byte
	// crypto/rand.Read never fails (it crashes the program instead).
	_, _ = rand.Read(secret[:])
	head := prefix + base64.RawURLEncoding.EncodeToString(secret[:])
	return head + checksum(head)
}

// checksum is CRC-32 (IEEE) of s as a zero-padded, 6-digit base62 number;
// 62^6 > 2^32, so every CRC fits.
func checksum(s string) string {
	n := crc32.ChecksumIEEE([]byte(s))
	var out [ChecksumLen]byte
	for i := ChecksumLen - 1; i >= 0; i-- {
		out[i] = base62Alphabet[n%62]
		n /= 62
	}
	return string(out[:])
}

// WellFormed reports whether token has a known prefix, the right lengths and
// alphabet, and a matching checksum. It says nothing about whether the token
// exists; it is cheap and safe to call on untrusted input.
func WellFormed(token string) bool {
	var prefix string
	switch {
	case strings.HasPrefix(token, WorkerPrefix):
		prefix = WorkerPrefix
	case strings.HasPrefix(token, AdminPrefix):
		prefix = AdminPrefix
	default:
		return false
	}
	if len(token) != len(prefix)+BodyLen+ChecksumLen {
		return false
	}
	head := token[:len(prefix)+BodyLen]
	body := head[len(prefix):]
	for i := 0; i < len(body); i++ {
		if strings.IndexByte(b64Alphabet, body[i]) < 0 {
			return false
		}
	}
	// 43 characters carry 258 bits for 256; an encoder always leaves the last
	// two bits zero, so anything else was not produced by NewXToken.
	if strings.IndexByte(b64Alphabet, body[BodyLen-1])&3 != 0 {
		return false
	}
	return token[len(head):] == checksum(head)
}

// Hash is the digest the store keeps: lowercase hex SHA-256 of the whole token.
func Hash(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}

// Equal compares two digests in constant time (for equal lengths; digests
// always have the same length, so the length leaks nothing).
func Equal(aHashHex, bHashHex string) bool {
	return subtle.ConstantTimeCompare([]byte(aHashHex), []byte(bHashHex)) == 1
}

// Accessor is what logs may show of a token: its first 8 characters and "…".
// It never shows more than half of its input, so short garbage pasted into a
// token header (a password, say) is not logged whole. "" gives "".
func Accessor(token string) string {
	if token == "" {
		return ""
	}
	n := min(accessorLen, utf8.RuneCountInString(token)/2)
	cut := 0
	for i := 0; i < n; i++ {
		_, size := utf8.DecodeRuneInString(token[cut:])
		cut += size
	}
	return token[:cut] + "…"
}

// Token holds a secret that must not leak by accident: fmt (every verb),
// encoding/json, encoding.TextMarshaler users and log/slog all see only its
// Accessor. Use Reveal where the secret itself is needed (to send it, hash it,
// or show it once to its owner).
//
// The protection works through method dispatch, so it does not cover
// string(t), an unexported struct field printed by fmt (fmt cannot call
// methods on unexported fields), or a Token used as a JSON map key
// (encoding/json writes string-kind keys directly).
type Token string

// Reveal returns the secret.
func (t Token) Reveal() string { return string(t) }

// String returns the accessor.
func (t Token) String() string { return Accessor(string(t)) }

// Format prints the accessor for every verb, honouring flags and width.
func (t Token) Format(f fmt.State, verb rune) {
	acc := t.String()
	switch {
	case verb == 'q':
		fmt.Fprintf(f, fmt.FormatString(f, 'q'), acc)
	case verb == 'v' && f.Flag('#'):
		fmt.Fprintf(f, "auth.Token(%s)", strconv.Quote(acc))
	default:
		fmt.Fprintf(f, fmt.FormatString(f, 's'), acc)
	}
}

// MarshalJSON encodes the accessor as a JSON string.
func (t Token) MarshalJSON() ([]byte, error) { return json.Marshal(t.String()) }

// MarshalText returns the accessor.
func (t Token) MarshalText() ([]byte, error) { return []byte(t.String()), nil }

// LogValue makes slog log the accessor.
func (t Token) LogValue() slog.Value { return slog.StringValue(t.String()) }

var (
	_ fmt.Stringer   = Token("")
	_ fmt.Formatter  = Token("")
	_ json.Marshaler = Token("")
	_ slog.LogValuer = Token("")
)

// Token kinds, by what they authenticate.
const (
	KindWorker = "worker"
	KindAdmin  = "admin"
)

// Diagnose says, from a token's shape alone, why it cannot be a valid token
// of the wanted kind (KindWorker or KindAdmin): an admin token where a worker
// token belongs, a mistyped or truncated one (the checksum does not match),
// or something that is no SimpleTuner token at all. It returns nil for a
// well-formed token of the wanted kind, which may still be unknown or revoked.
// The error never contains the token.
func Diagnose(token, want string) error {
	var kind, prefix, other string
	switch {
	case token == "":
		return errors.New("no token given")
	case strings.HasPrefix(token, WorkerPrefix):
		kind, prefix = KindWorker, WorkerPrefix
	case strings.HasPrefix(token, AdminPrefix):
		kind, prefix = KindAdmin, AdminPrefix
	default:
		return fmt.Errorf("not a SimpleTuner token: a worker token starts with %q, an admin token with %q", WorkerPrefix, AdminPrefix)
	}
	other = AdminPrefix
	if want == KindWorker {
		other = WorkerPrefix
	}
	if kind != want {
		return fmt.Errorf("this is %s %s token (%s…), not %s %s token (%s…)", article(kind), kind, prefix, article(want), want, other)
	}
	if !WellFormed(token) {
		return errors.New("malformed token (checksum): it was mistyped, cut short or changed")
	}
	return nil
}

func article(kind string) string {
	if kind == KindAdmin {
		return "an"
	}
	return "a"
}
