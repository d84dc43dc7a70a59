package webhook

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Headers of every request.
const (
	// SignatureHeader carries "t=<unix seconds>,v1=<hex HMAC-SHA256>": the
	// HMAC, keyed with the subscription's secret, of the timestamp, a dot
	// and the body exactly as sent.
	SignatureHeader = "X-SimpleTuner-Signature"
	EventHeader     = "X-SimpleTuner-Event"    // the event's name
	EventIDHeader   = "X-SimpleTuner-Event-Id" // the event's ID: the same on every retry
	DeliveryHeader  = "X-SimpleTuner-Delivery" // the delivery's number (event and subscription)
	AttemptHeader   = "X-SimpleTuner-Attempt"  // 1 for the first request, 2 for the first retry …
)

// DefaultTolerance is how far from the receiver's clock a signature's
// timestamp may be before Verify takes the request for a replay.
const DefaultTolerance = 5 * time.Minute

// Sign returns the SignatureHeader value for body sent at t.
func Sign(secret string, t time.Time, body []byte) string {
	ts := strconv.FormatInt(t.Unix(), 10)
	return "t=" + ts + ",v1=" + hex.EncodeToString(mac(secret, ts, body))
}

func mac(secret, ts string, body []byte) []byte {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(ts))
	m.Write([]byte{'.'})
	m.Write(body)
	return m.Sum(nil)
}

// Signature is a parsed SignatureHeader: its timestamp and its v1 MACs
// (several while a receiver accepts two secrets).
type Signature struct {
	Timestamp int64
	V1        [][]byte
}

// Errors of Verify.
var (
	ErrBadSignature = errors.New("the signature does not match")
	ErrStale        = errors.New("the signature's timestamp is too far from now: a replay, or a clock off")
)

// ParseSignature reads a SignatureHeader value. Unknown schemes are skipped,
// so a later scheme can be sent beside v1.
func ParseSignature(h string) (Signature, error) {
	var s Signature
	seenT := false
	for part := range strings.SplitSeq(h, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			return Signature{}, fmt.Errorf("signature header: %q is not key=value", part)
		}
		switch k {
		case "t":
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n < 0 || seenT {
				return Signature{}, fmt.Errorf("signature header: bad or repeated timestamp %q", v)
			}
			s.Timestamp, seenT = n, true
		case "v1":
			b, err := hex.DecodeString(v)
			if err != nil || len(b) != sha256.Size {
				return Signature{}, fmt.Errorf("signature header: v1 is not a hex SHA-256 MAC")
			}
			s.V1 = append(s.V1, b)
		}
	}
	if !seenT || len(s.V1) == 0 {
		return Signature{}, errors.New("signature header: needs t=… and v1=…")
	}
	return s, nil
}

// Verify checks a request as a receiver does: header is its SignatureHeader,
// body the bytes received, now the receiver's clock. A timestamp more than
// tolerance away is ErrStale (a replay); receivers also drop an event ID
// they have already seen, as a retry may deliver it again.
func Verify(header, secret string, body []byte, now time.Time, tolerance time.Duration) error {
	sig, err := ParseSignature(header)
	if err != nil {
		return err
	}
	want := mac(secret, strconv.FormatInt(sig.Timestamp, 10), body)
	match := false
	for _, v := range sig.V1 {
		match = hmac.Equal(v, want) || match
	}
	if !match {
		return ErrBadSignature
	}
	if d := now.Sub(time.Unix(sig.Timestamp, 0)); d > tolerance || d < -tolerance {
		return ErrStale
	}
	return nil
}
