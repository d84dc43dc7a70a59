package webhook

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestSignVerify(t *testing.T) {
	t.Parallel()
	body := []byte(`{"id":"evt_1","type":"job.completed"}`)
	at := time.Unix(1_900_000_000, 0)
	h := Sign("whsec_abc", at, body)
	if !strings.HasPrefix(h, "t=1900000000,v1=") || len(h) != len("t=1900000000,v1=")+64 {
		t.Fatalf("header %q", h)
	}
	if err := Verify(h, "whsec_abc", body, at.Add(time.Minute), DefaultTolerance); err != nil {
		t.Fatalf("a good signature: %v", err)
	}
	for _, tc := range []struct {
		name, header, secret string
		body                 []byte
		now                  time.Time
		want                 error
	}{
		{"another body", h, "whsec_abc", []byte(`{"id":"evt_1","type":"job.failed"}`), at, ErrBadSignature},
		{"another secret", h, "whsec_abd", body, at, ErrBadSignature},
		{"another timestamp", strings.Replace(h, "t=1900000000", "t=1900000001", 1), "whsec_abc", body, at, ErrBadSignature},
		{"replayed later", h, "whsec_abc", body, at.Add(DefaultTolerance + time.Second), ErrStale},
		{"from the future", h, "whsec_abc", body, at.Add(-DefaultTolerance - time.Second), ErrStale},
	} {
		if err := Verify(tc.header, tc.secret, tc.body, tc.now, DefaultTolerance); !errors.Is(err, tc.want) {
			t.Errorf("%s: got %v, want %v", tc.name, err, tc.want)
		}
	}
	// A receiver accepting two secrets (while rotating) takes either v1.
	other := Sign("whsec_new", at, body)
	both := h + "," + other[strings.Index(other, "v1="):]
	if err := Verify(both, "whsec_new", body, at, DefaultTolerance); err != nil {
		t.Fatalf("two v1: %v", err)
	}
}

func TestParseSignatureRefuses(t *testing.T) {
	t.Parallel()
	for _, h := range []string{"", "t=1", "v1=00", "t=x,v1=" + strings.Repeat("0", 64), "t=1,v1=zz", "t=1,t=2,v1=" + strings.Repeat("0", 64),
		"t=1,v1=" + strings.Repeat("0", 62), "garbage", "t=-5,v1=" + strings.Repeat("0", 64)} {
		if _, err := ParseSignature(h); err == nil {
			t.Errorf("%q parsed", h)
		}
	}
	s, err := ParseSignature("t=7, v0=abc, v1=" + strings.Repeat("ab", 32))
	if err != nil || s.Timestamp != 7 || len(s.V1) != 1 {
		t.Fatalf("an unknown scheme beside v1: %+v %v", s, err)
	}
}

func FuzzParseSignature(f *testing.F) {
	f.Add(Sign("k", time.Unix(1, 0), []byte("b")))
	f.Add("t=1,v1=zz")
	f.Add(",,=,")
	f.Fuzz(func(t *testing.T, h string) {
		s, err := ParseSignature(h)
		if err != nil {
			return
		}
		if s.Timestamp < 0 || len(s.V1) == 0 {
			t.Fatalf("%q parsed into %+v", h, s)
		}
		for _, v := range s.V1 {
			if len(v) != 32 {
				t.Fatalf("%q: a v1 of %d bytes", h, len(v))
			}
		}
		_ = Verify(h, "secret", []byte("body"), time.Unix(s.Timestamp, 0), DefaultTolerance)
	})
}

func FuzzSignVerify(f *testing.F) {
	f.Add("whsec_x", []byte(`{"a":1}`), int64(1_900_000_000))
	f.Fuzz(func(t *testing.T, secret string, body []byte, ts int64) {
		if ts < 0 || ts > 1<<40 {
			return
		}
		at := time.Unix(ts, 0)
		h := Sign(secret, at, body)
		if err := Verify(h, secret, body, at, time.Second); err != nil {
			t.Fatalf("own signature refused: %v", err)
		}
		if err := Verify(h, secret+"x", body, at, time.Second); !errors.Is(err, ErrBadSignature) {
			t.Fatalf("another secret: %v", err)
		}
	})
}
