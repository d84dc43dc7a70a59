package auth

import (
	"strings"
	"testing"
)

func FuzzWellFormed(f *testing.F) {
	for _, s := range []string{
		NewWorkerToken(), NewAdminToken(), "", "wt_", "sta_", "sta_wrong",
		"wt_" + strings.Repeat("A", BodyLen) + "000000", "\x00\xff", "wt_é",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if WellFormed(s) {
			// Anything accepted has the documented shape.
			p := WorkerPrefix
			if strings.HasPrefix(s, AdminPrefix) {
				p = AdminPrefix
			}
			if !strings.HasPrefix(s, p) || len(s) != len(p)+BodyLen+ChecksumLen {
				t.Fatalf("WellFormed accepted %q", s)
			}
			if head := s[:len(p)+BodyLen]; s[len(head):] != checksum(head) {
				t.Fatalf("WellFormed accepted a bad checksum: %q", s)
			}
		}
		if a := Accessor(s); len(s) > 0 && a == s {
			t.Fatalf("Accessor returned its whole input %q", s)
		}
		_ = Hash(s)
		if !WellFormed(NewWorkerToken()) || !WellFormed(NewAdminToken()) {
			t.Fatal("a fresh token is not well formed")
		}
	})
}
