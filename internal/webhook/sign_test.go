package webhook

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strings"
	"testing"
	"time"
)

func TestSignVerify(t *testing.T) {
	t.Parallel()
	const id = "evt_1"
	body := []byte(`{"id":"evt_1","type":"job.completed"}`)
	at := time.Unix(1_900_000_000, 0)
	h := Sign("whsec_abc", id, at, body)
	if !strings.HasPrefix(h, "t=1900000000,v2=") || len(h) != len("t=1900000000,v2=,v1=")+128 {
		t.Fatalf("header %q", h)
	}
	if err := Verify(h, id, "whsec_abc", body, at.Add(time.Minute), DefaultTolerance); err != nil {
		t.Fatalf("a good signature: %v", err)
	}
	for _, tc := range []struct {
		name, header, id, secret string
		body                     []byte
		now                      time.Time
		want                     error
	}{
		{"another body", h, id, "whsec_abc", []byte(`{"id":"evt_1","type":"job.failed"}`), at, ErrBadSignature},
		{"another secret", h, id, "whsec_abd", body, at, ErrBadSignature},
		{"another timestamp", strings.Replace(h, "t=1900000000", "t=1900000001", 1), id, "whsec_abc", body, at, ErrBadSignature},
		// A captured request sent again under a fresh event ID, to slip
		// past the receiver's duplicate check: the ID is signed.
		{"another event ID", h, "evt_2", "whsec_abc", body, at, ErrBadSignature},
		{"replayed later", h, id, "whsec_abc", body, at.Add(DefaultTolerance + time.Second), ErrStale},
		{"from the future", h, id, "whsec_abc", body, at.Add(-DefaultTolerance - time.Second), ErrStale},
	} {
		if err := Verify(tc.header, tc.id, tc.secret, tc.body, tc.now, DefaultTolerance); !errors.Is(err, tc.want) {
			t.Errorf("%s: got %v, want %v", tc.name, err, tc.want)
		}
	}
	// A receiver accepting two secrets (while rotating) takes either v2.
	other := Sign("whsec_new", id, at, body)
	both := h + "," + strings.Split(other, ",")[1]
	if err := Verify(both, id, "whsec_new", body, at, DefaultTolerance); err != nil {
		t.Fatalf("two v2: %v", err)
	}
	// v1 alone is not enough for Verify: it does not cover the event ID.
	v1only := "t=1900000000," + strings.Split(h, ",")[2]
	if err := Verify(v1only, id, "whsec_abc", body, at, DefaultTolerance); !errors.Is(err, ErrBadSignature) {
		t.Fatalf("v1 alone: %v", err)
	}
}

// v1 is still sent as before, so a receiver not yet moved to v2 keeps
// accepting requests.
func TestSignKeepsV1(t *testing.T) {
	t.Parallel()
	body := []byte(`{"id":"evt_1"}`)
	h := Sign("whsec_abc", "evt_1", time.Unix(1_900_000_000, 0), body)
	m := hmac.New(sha256.New, []byte("whsec_abc"))
	m.Write([]byte("1900000000." + string(body)))
	if !strings.HasSuffix(h, ",v1="+hex.EncodeToString(m.Sum(nil))) {
		t.Fatalf("v1 is not the HMAC of t.body: %q", h)
	}
}

// The worked example of docs/webhooks.md.
const (
	exampleSecret = "whsec_example_0123456789abcdef"
	exampleID     = "evt_5tcgzj3tdksqw3fkyd76"
	exampleT      = 1764107843
	exampleBody   = `{"id":"evt_5tcgzj3tdksqw3fkyd76","type":"job.completed"}`
	exampleHeader = "t=1764107843,v2=068cfd2376f3596201bc61421e7ed8d1f6115af38a058e628f073d0f4f6df467," +
		"v1=85c2b51505daa074d2343ab3a6d865e9b8911eee48052f06689cff2652042c7c"
)

func TestWorkedExample(t *testing.T) {
	t.Parallel()
	if h := Sign(exampleSecret, exampleID, time.Unix(exampleT, 0), []byte(exampleBody)); h != exampleHeader {
		t.Fatalf("the worked example signs as %q", h)
	}
}

func TestParseSignatureRefuses(t *testing.T) {
	t.Parallel()
	for _, h := range []string{"", "t=1", "v2=00", "t=x,v2=" + strings.Repeat("0", 64), "t=1,v2=zz", "t=1,t=2,v2=" + strings.Repeat("0", 64),
		"t=1,v2=" + strings.Repeat("0", 62), "garbage", "t=-5,v2=" + strings.Repeat("0", 64), "t=1,v1=zz"} {
		if _, err := ParseSignature(h); err == nil {
			t.Errorf("%q parsed", h)
		}
	}
	s, err := ParseSignature("t=7, v0=abc, v2=" + strings.Repeat("ab", 32))
	if err != nil || s.Timestamp != 7 || len(s.V2) != 1 {
		t.Fatalf("an unknown scheme beside v2: %+v %v", s, err)
	}
}

func FuzzParseSignature(f *testing.F) {
	f.Add(Sign("k", "evt_1", time.Unix(1, 0), []byte("b")))
	f.Add("t=1,v2=zz")
	f.Add(",,=,")
	f.Fuzz(func(t *testing.T, h string) {
		s, err := ParseSignature(h)
		if err != nil {
			return
		}
		if s.Timestamp < 0 || len(s.V1)+len(s.V2) == 0 {
			t.Fatalf("%q parsed into %+v", h, s)
		}
		for _, v := range append(s.V1, s.V2...) {
			if len(v) != 32 {
				t.Fatalf("%q: a MAC of %d bytes", h, len(v))
			}
		}
		_ = Verify(h, "evt_1", "secret", []byte("body"), time.Unix(s.Timestamp, 0), DefaultTolerance)
	})
}

func FuzzSignVerify(f *testing.F) {
	f.Add("whsec_x", "evt_1", []byte(`{"a":1}`), int64(1_900_000_000))
	f.Fuzz(func(t *testing.T, secret, id string, body []byte, ts int64) {
		if ts < 0 || ts > 1<<40 {
			return
		}
		at := time.Unix(ts, 0)
		h := Sign(secret, id, at, body)
		if err := Verify(h, id, secret, body, at, time.Second); err != nil {
			t.Fatalf("own signature refused: %v", err)
		}
		if err := Verify(h, id, secret+"x", body, at, time.Second); !errors.Is(err, ErrBadSignature) {
			t.Fatalf("another secret: %v", err)
		}
		if err := Verify(h, id+"x", secret, body, at, time.Second); !errors.Is(err, ErrBadSignature) {
			t.Fatalf("another event ID: %v", err)
		}
	})
}
