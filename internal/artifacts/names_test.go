package artifacts

import (
	"errors"
	"path"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestValidateKey(t *testing.T) {
	t.Parallel()
	good := []string{
		"model.safetensors",
		"checkpoints/step-500/pytorch_lora_weights.safetensors",
		"a/b/c/d/e/f/g",
		"..hidden-but-not-dotdot",
		"x..y/z",
		"über/模型.bin",
		"name with spaces",
		strings.Repeat("a", MaxSegmentLen),
		strings.Repeat("a/", MaxKeyLen/2-1) + "a",
	}
	for _, k := range good {
		if err := ValidateKey(k); err != nil {
			t.Errorf("ValidateKey(%q) = %v, want ok", k, err)
		}
	}
	bad := map[string]string{
		"":                                      "empty",
		"/etc/passwd":                           "absolute",
		"..":                                    `".." segment`,
		"../x":                                  `".." segment`,
		"a/../../x":                             `".." segment`,
		"a/..":                                  `".." segment`,
		"./x":                                   `"." segment`,
		"a/./b":                                 `"." segment`,
		"a//b":                                  "empty segment",
		"a/":                                    "empty segment",
		"a\x00b":                                "NUL",
		"a\\..\\b":                              "backslash",
		"..\\x":                                 "backslash",
		"a\nb":                                  "control character",
		"a\x7fb":                                "control character",
		"a\u0085b":                              "control character",
		"bad\xffutf8":                           "UTF-8",
		strings.Repeat("a", 256):                "segment longer",
		strings.Repeat("a/", MaxKeyLen/2) + "a": "longer than 1024",
	}
	for k, want := range bad {
		err := ValidateKey(k)
		if err == nil || !errors.Is(err, ErrInvalidName) || !strings.Contains(err.Error(), want) {
			t.Errorf("ValidateKey(%q) = %v, want an error about %q", k, err, want)
		}
	}
}

func TestValidateBucket(t *testing.T) {
	t.Parallel()
	for _, b := range []string{"outputs", "my-bucket.v2", "A_1", "0", strings.Repeat("b", 63)} {
		if err := ValidateBucket(b); err != nil {
			t.Errorf("ValidateBucket(%q) = %v", b, err)
		}
	}
	for _, b := range []string{"", ".", "..", ".meta", "-x", "_x", "a/b", "a b", "a\x00", "a\\b", strings.Repeat("b", 64)} {
		if err := ValidateBucket(b); err == nil || !errors.Is(err, ErrInvalidName) {
			t.Errorf("ValidateBucket(%q) = %v, want an error", b, err)
		}
	}
}

func TestParseName(t *testing.T) {
	t.Parallel()
	ref := Ref{JobID: "j_abc", Attempt: 12, Bucket: "out", Key: "a/b.bin"}
	for _, tc := range []struct {
		name    string
		attempt int
		meta    bool
		ok      bool
	}{
		{ref.dataName(), 12, false, true},
		{ref.metaName(), 12, true, true},
		{"j_abc/012/out/a", 0, false, false}, // not how numbers are written
		{"j_abc/0/out/a", 0, false, false},
		{"j_abc/1/.tmp/x", 0, false, false},
		{"j_abc/1/out", 0, false, false},
		{"j_abd/1/out/a", 0, false, false},
		{"j_abc/1/.meta/.meta/a", 0, false, false},
	} {
		n, meta, p, ok := parseName("j_abc", tc.name)
		if ok != tc.ok || (ok && (n != tc.attempt || meta != tc.meta || p != "out/a/b.bin")) {
			t.Errorf("parseName(%q) = %d, %v, %q, %v", tc.name, n, meta, p, ok)
		}
	}
}

// Whatever ValidateKey accepts stays below the directory it is joined to,
// joined as a path or split into segments, and is valid UTF-8 without NUL.
func FuzzValidateKey(f *testing.F) {
	for _, s := range []string{"a/b", "../x", "a/../b", "/abs", "a\x00", "a\\b", "a//b", ".", "…/…", "a/./b", "%2e%2e"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, k string) {
		if ValidateKey(k) != nil {
			return
		}
		if !utf8.ValidString(k) || strings.ContainsAny(k, "\x00\\") || len(k) > MaxKeyLen {
			t.Fatalf("accepted %q", k)
		}
		joined := path.Join("/root/job/1/bucket", k)
		if !strings.HasPrefix(joined, "/root/job/1/bucket/") {
			t.Fatalf("key %q escapes: %s", k, joined)
		}
		if path.Clean(k) != k {
			t.Fatalf("key %q is not clean (%q): two names for one object", k, path.Clean(k))
		}
		for _, seg := range strings.Split(k, "/") {
			if seg == "" || seg == "." || seg == ".." || len(seg) > MaxSegmentLen {
				t.Fatalf("key %q has segment %q", k, seg)
			}
		}
		// A valid key under a valid bucket round-trips through the layout.
		ref := Ref{JobID: "j_x", Attempt: 3, Bucket: "b", Key: k}
		if err := ref.Validate(); err != nil {
			t.Fatalf("ref with key %q: %v", k, err)
		}
		for _, name := range []string{ref.dataName(), ref.metaName()} {
			n, _, p, ok := parseName("j_x", name)
			if !ok || n != 3 || p != "b/"+k {
				t.Fatalf("parseName(%q) = %d %q %v", name, n, p, ok)
			}
		}
	})
}

func FuzzDecodeMeta(f *testing.F) {
	f.Add([]byte(meta{Version: 1, Size: 3, MD5: strings.Repeat("a", 32), SHA256: strings.Repeat("b", 64)}.encode()))
	f.Add([]byte(`{"v":1,"size":-1}`))
	f.Add([]byte(`{`))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := decodeMeta(b)
		if err != nil {
			return
		}
		if m.Size < 0 || len(m.MD5) != 32 || len(m.SHA256) != 64 || m.Version != metaVersion {
			t.Fatalf("accepted %q as %+v", b, m)
		}
		again, err := decodeMeta(m.encode())
		if err != nil || again.Size != m.Size || again.MD5 != m.MD5 || again.SHA256 != m.SHA256 || !again.Modified.Equal(m.Modified) {
			t.Fatalf("re-encoding %+v: %+v, %v", m, again, err)
		}
	})
}
