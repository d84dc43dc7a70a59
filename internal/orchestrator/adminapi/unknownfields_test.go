package adminapi

import (
	"fmt"
	"strings"
	"testing"

	"github.com/simpletuner/simpletuner-orchestration/internal/api"
)

func TestUnknownFieldWarningsAreBounded(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	b.WriteString(`{"config":{}`)
	for i := range 1000 {
		fmt.Fprintf(&b, `,"junk%04d":1`, i)
	}
	fmt.Fprintf(&b, `,"%s":1}`, strings.Repeat("k", 5000))
	ws := unknownFieldWarnings([]byte(b.String()), api.Submit{})
	if len(ws) != maxFieldWarnings+1 || ws[maxFieldWarnings] != "991 more unknown fields were ignored" {
		t.Fatalf("%d warnings: %q", len(ws), ws[len(ws)-1])
	}
	for _, w := range ws {
		if len(w) > 200 {
			t.Errorf("a warning of %d bytes", len(w))
		}
	}
}

func FuzzUnknownFieldWarnings(f *testing.F) {
	f.Add([]byte(`{"priorty":1,"config":{}}`))
	f.Add([]byte(`{"\u0000\u001b[31m":1}`))
	f.Add([]byte(`[1,2]`))
	f.Fuzz(func(t *testing.T, body []byte) {
		for _, w := range unknownFieldWarnings(body, api.Submit{}) {
			if strings.ContainsAny(w, "\x00\x1b\r\n") {
				t.Fatalf("a control character reaches a warning: %q", w)
			}
		}
	})
}
