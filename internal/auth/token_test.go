package auth

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"
)

func TestTokenFormat(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		gen    func() string
		prefix string
	}{
		{"worker", NewWorkerToken, WorkerPrefix},
		{"admin", NewAdminToken, AdminPrefix},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			seen := make(map[string]bool)
			for range 1000 {
				tok := tc.gen()
				if !strings.HasPrefix(tok, tc.prefix) {
					t.Fatalf("%q lacks prefix %q", tok, tc.prefix)
				}
				if got, want := len(tok), len(tc.prefix)+BodyLen+ChecksumLen; got != want {
					t.Fatalf("%q has length %d, want %d", tok, got, want)
				}
				if !WellFormed(tok) {
					t.Fatalf("fresh token %q is not well formed", tok)
				}
				if seen[tok] {
					t.Fatalf("duplicate token %q", tok)
				}
				seen[tok] = true
			}
		})
	}
}

func TestWellFormedRejects(t *testing.T) {
	t.Parallel()
	good := NewAdminToken()
	head := good[:len(AdminPrefix)+BodyLen]
	tests := []struct {
		name  string
		token string
	}{
		{"empty", ""},
		{"prefix only", "sta_"},
		{"unknown prefix", "xx_" + good[len(AdminPrefix):]},
		{"short", good[:len(good)-1]},
		{"long", good + "0"},
		{"padding char", head[:len(head)-1] + "=" + checksum(head[:len(head)-1]+"=")},
		{"standard base64 char", head[:10] + "+" + head[11:] + checksum(head[:10]+"+"+head[11:])},
		{"non-canonical last char", head[:len(head)-1] + "B" + checksum(head[:len(head)-1]+"B")},
		{"worker prefix, admin body", WorkerPrefix + good[len(AdminPrefix):]},
		{"checksum wrong", head + "000000"},
		{"whitespace", " " + good},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if WellFormed(tc.token) {
				t.Errorf("WellFormed(%q) = true", tc.token)
			}
		})
	}
}

// CRC-32 detects every single-character change, so flipping any position of
// a token to any other character must be caught.
func TestWellFormedDetectsEveryFlippedChar(t *testing.T) {
	t.Parallel()
	for _, tok := range []string{NewWorkerToken(), NewAdminToken()} {
		for i := range len(tok) {
			for _, c := range []byte(b64Alphabet) {
				if c == tok[i] {
					continue
				}
				bad := tok[:i] + string(c) + tok[i+1:]
				if WellFormed(bad) {
					t.Fatalf("flipping position %d of %q to %q went unnoticed", i, tok, c)
				}
			}
		}
	}
}

func TestChecksumShape(t *testing.T) {
	t.Parallel()
	tests := []struct{ in, want string }{
		{"", "000000"},           // CRC-32 of nothing is 0
		{"a", "4GEHKN"},          // 0xe8b7be43 = 3904355907
		{"wt_", checksum("wt_")}, // fixed width regardless of value
	}
	for _, tc := range tests {
		if got := checksum(tc.in); got != tc.want || len(got) != ChecksumLen {
			t.Errorf("checksum(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestHashAndEqual(t *testing.T) {
	t.Parallel()
	tok := NewWorkerToken()
	h := Hash(tok)
	if h != Hash(tok) {
		t.Fatal("Hash is not deterministic")
	}
	if len(h) != 64 || strings.ToLower(h) != h {
		t.Fatalf("Hash = %q, want 64 lowercase hex digits", h)
	}
	// Known vector: SHA-256("abc").
	if got := Hash("abc"); got != "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad" {
		t.Fatalf("Hash(abc) = %s", got)
	}
	other := Hash(NewWorkerToken())
	tests := []struct {
		a, b string
		want bool
	}{
		{h, h, true},
		{h, other, false},
		{h, h[:63], false},
		{h, "", false},
		{"", "", true},
	}
	for _, tc := range tests {
		if got := Equal(tc.a, tc.b); got != tc.want {
			t.Errorf("Equal(%q, %q) = %v, want %v", tc.a, tc.b, got, tc.want)
		}
	}
}

func TestAccessor(t *testing.T) {
	t.Parallel()
	tok := NewAdminToken()
	tests := []struct{ in, want string }{
		{"", ""},
		{tok, tok[:8] + "…"},
		{"sta_wrong", "sta_…"},
		{"ab", "a…"},
		{"a", "…"},
		{"pässwörd-pässwörd", "pässwörd…"},
	}
	for _, tc := range tests {
		if got := Accessor(tc.in); got != tc.want {
			t.Errorf("Accessor(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// The Token type must never print its secret, whatever prints it.
func TestTokenNeverLeaks(t *testing.T) {
	t.Parallel()
	secret := NewWorkerToken()
	tok := Token(secret)
	acc := Accessor(secret)
	type wrapper struct {
		Tok Token
		Ptr *Token
	}
	w := wrapper{Tok: tok, Ptr: &tok}

	jsonOf := func(v any) string {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	slogJSON := func(args ...any) string {
		var buf bytes.Buffer
		slog.New(slog.NewJSONHandler(&buf, nil)).Info("msg", args...)
		return buf.String()
	}
	slogText := func(args ...any) string {
		var buf bytes.Buffer
		slog.New(slog.NewTextHandler(&buf, nil)).Info("msg", args...)
		return buf.String()
	}
	text, _ := tok.MarshalText()

	tests := []struct {
		name, out string
	}{
		{"String", tok.String()},
		{"%v", fmt.Sprintf("%v", tok)},
		{"%s", fmt.Sprintf("%s", tok)},
		{"%q", fmt.Sprintf("%q", tok)},
		{"%+v", fmt.Sprintf("%+v", tok)},
		{"%#v", fmt.Sprintf("%#v", tok)},
		{"%x", fmt.Sprintf("%x", tok)},
		{"%20s", fmt.Sprintf("%20s", tok)},
		{"pointer %v", fmt.Sprintf("%v", &tok)},
		{"struct %+v", fmt.Sprintf("%+v", w)},
		{"struct %#v", fmt.Sprintf("%#v", w)},
		{"Sprint", fmt.Sprint(tok, w)},
		{"json", jsonOf(tok)},
		{"json struct", jsonOf(w)},
		{"MarshalText", string(text)},
		{"slog json", slogJSON("token", tok)},
		{"slog json Any", slogJSON(slog.Any("token", tok))},
		{"slog json struct", slogJSON("w", w)},
		{"slog json group", slogJSON(slog.Group("g", "token", tok))},
		{"slog text", slogText("token", tok, "w", w)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if strings.Contains(tc.out, secret) || strings.Contains(tc.out, secret[len(WorkerPrefix):]) {
				t.Fatalf("secret leaked: %s", tc.out)
			}
			if tc.name != "%x" && !strings.Contains(tc.out, strings.TrimSuffix(acc, "…")) {
				t.Fatalf("accessor %q missing from %s", acc, tc.out)
			}
		})
	}
	if tok.Reveal() != secret {
		t.Fatal("Reveal does not return the secret")
	}
}

func TestTokenFormatDetails(t *testing.T) {
	t.Parallel()
	tok := Token("sta_abcdefghijklmnop")
	tests := []struct{ format, want string }{
		{"%v", "sta_abcd…"},
		{"%q", `"sta_abcd…"`},
		{"%#v", `auth.Token("sta_abcd…")`},
		{"%12s|", "   sta_abcd…|"},
		{"%-12s|", "sta_abcd…   |"},
	}
	for _, tc := range tests {
		if got := fmt.Sprintf(tc.format, tok); got != tc.want {
			t.Errorf("Sprintf(%q) = %q, want %q", tc.format, got, tc.want)
		}
	}
}

func TestDiagnose(t *testing.T) {
	worker, admin := NewWorkerToken(), NewAdminToken()
	flip := func(s string, i int) string {
		b := []byte(s)
		if b[i] == 'a' {
			b[i] = 'b'
		} else {
			b[i] = 'a'
		}
		return string(b)
	}
	for _, c := range []struct {
		token, want, says string
	}{
		{worker, KindWorker, ""},
		{admin, KindAdmin, ""},
		{admin, KindWorker, "this is an admin token (sta_…), not a worker token (wt_…)"},
		{worker, KindAdmin, "this is a worker token (wt_…), not an admin token (sta_…)"},
		{flip(worker, 10), KindWorker, "malformed token (checksum)"},
		{worker[:len(worker)-1], KindWorker, "malformed token (checksum)"},
		{"hunter2", KindWorker, "not a SimpleTuner token"},
		{"", KindAdmin, "no token given"},
	} {
		err := Diagnose(c.token, c.want)
		switch {
		case c.says == "" && err != nil:
			t.Errorf("Diagnose(%s, %s) = %v, want nil", Accessor(c.token), c.want, err)
		case c.says != "" && (err == nil || !strings.Contains(err.Error(), c.says)):
			t.Errorf("Diagnose(%s, %s) = %v, want %q", Accessor(c.token), c.want, err, c.says)
		case err != nil && c.token != "" && strings.Contains(err.Error(), c.token):
			t.Errorf("the diagnosis contains the token")
		}
	}
}
