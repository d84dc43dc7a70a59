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
	// SignatureHeader carries "t=<unix seconds>,v2=<hex>,v1=<hex>". v2 is
	// the HMAC-SHA256, keyed with the subscription's secret, of the event's
	// ID, a dot, the timestamp, a dot and the body exactly as sent: it
	// covers everything a receiver relies on to drop a replay. v1 (the
	// timestamp, a dot and the body) is still sent for receivers that have
	// not moved to v2; it does not cover the event ID.
	SignatureHeader = "X-SimpleTuner-Signature"
	// TimestampHeader carries the signature's timestamp (the t= above), in
	// Unix seconds.
	TimestampHeader = "X-SimpleTuner-Timestamp"
	EventHeader     = "X-SimpleTuner-Event"    // the event's name
	EventIDHeader   = "X-SimpleTuner-Event-Id" // the event's ID: the same on every retry
	DeliveryHeader  = "X-SimpleTuner-Delivery" // the delivery's number (event and subscription)
	AttemptHeader   = "X-SimpleTuner-Attempt"  // 1 for the first request, 2 for the first retry …
)

// DefaultTolerance is how far from the receiver's clock a signature's
// timestamp may be before Verify takes the request for a replay.
const DefaultTolerance = 5 * time.Minute

// Sign returns the SignatureHeader value for the event eventID whose body
// is sent at t.
func Sign(secret, eventID string, t time.Time, body []byte) string {
	ts := strconv.FormatInt(t.Unix(), 10)
	return "t=" + ts + ",v2=" + hex.EncodeToString(macV2(secret, eventID, ts, body)) +
		",v1=" + hex.EncodeToString(macV1(secret, ts, body))
}

// macV2 is the HMAC of "<event id>.<timestamp>.<body>".
func macV2(secret, eventID, ts string, body []byte) []byte {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(eventID + "." + ts + "."))
	m.Write(body)
	return m.Sum(nil)
}

// macV1 is the HMAC of "<timestamp>.<body>", the scheme before v2.
func macV1(secret, ts string, body []byte) []byte {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(ts + "."))
	m.Write(body)
	return m.Sum(nil)
}

// Signature is a parsed SignatureHeader: its timestamp and its MACs by
// scheme (several of one while a receiver accepts two secrets).
type Signature struct {
	Timestamp int64
	V2        [][]byte
	V1        [][]byte
}

// Errors of Verify.
var (
	ErrBadSignature = errors.New("the signature does not match")
	ErrStale        = errors.New("the signature's timestamp is too far from now: a replay, or a clock off")
)

// ParseSignature reads a SignatureHeader value. Unknown schemes are skipped,
// so a later scheme can be sent beside these.
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
		case "v1", "v2":
			b, err := hex.DecodeString(v)
			if err != nil || len(b) != sha256.Size {
				return Signature{}, fmt.Errorf("signature header: %s is not a hex SHA-256 MAC", k)
			}
			if k == "v2" {
				s.V2 = append(s.V2, b)
			} else {
				s.V1 = append(s.V1, b)
			}
		}
	}
	if !seenT || len(s.V1)+len(s.V2) == 0 {
		return Signature{}, errors.New("signature header: needs t=… and v2=…")
	}
	return s, nil
}

// Verify checks a request as a receiver does, with the v2 scheme: header
// is its SignatureHeader, eventID its EventIDHeader, body the bytes
// received, now the receiver's clock. A timestamp more than tolerance away
// is ErrStale (a replay). The event ID is signed, so a receiver that drops
// an ID it has already seen (a retry may deliver one again) can trust it.
func Verify(header, eventID, secret string, body []byte, now time.Time, tolerance time.Duration) error {
	sig, err := ParseSignature(header)
	if err != nil {
		return err
	}
	want := macV2(secret, eventID, strconv.FormatInt(sig.Timestamp, 10), body)
	match := false
	for _, v := range sig.V2 {
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
