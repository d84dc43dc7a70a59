// Package audit defines the append-only audit record and its hash chain. Each
// record carries the hash of the one before it, so removing or editing a record
// breaks every hash after it; Verify finds the first break.
package audit

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Genesis is the previous-hash of the first record in a chain.
const Genesis = "genesis"

// Outcomes of an audited action.
const (
	Success = "success"
	Failure = "failure"
)

// Record is one audit entry. Seq, PrevHash and Hash are assigned by the store
// when the record is appended.
type Record struct {
	Seq        int64           `json:"seq"`
	Time       time.Time       `json:"time"`
	Actor      string          `json:"actor"`    // "admin:<token id>", "worker:<id>", "local:uid=0", "system"
	ActorIP    string          `json:"actor_ip"` // peer address, "" for system actions
	Action     string          `json:"action"`   // e.g. "worker.create", "job.dispatch"
	TargetType string          `json:"target_type"`
	TargetID   string          `json:"target_id"`
	Outcome    string          `json:"outcome"` // Success or Failure
	Details    json.RawMessage `json:"details"` // JSON object, never a secret
	PrevHash   string          `json:"prev_hash"`
	Hash       string          `json:"hash"`
}

// New builds a record stamped now with details marshalled from v (nil → {}).
func New(actor, ip, action, targetType, targetID, outcome string, details any) Record {
	raw := json.RawMessage(`{}`)
	if details != nil {
		if b, err := json.Marshal(details); err == nil {
			raw = b
		}
	}
	return Record{Time: time.Now().UTC().Truncate(time.Microsecond), Actor: actor, ActorIP: ip,
		Action: action, TargetType: targetType, TargetID: targetID, Outcome: outcome, Details: raw}
}

// ComputeHash returns the hex SHA-256 over the record's fields and prevHash.
// Fields are length-prefixed so no two different records share an input.
func ComputeHash(r Record, prevHash string) string {
	var b strings.Builder
	for _, f := range []string{
		strconv.FormatInt(r.Seq, 10), r.Time.UTC().Format(time.RFC3339Nano), r.Actor, r.ActorIP,
		r.Action, r.TargetType, r.TargetID, r.Outcome, string(r.Details), prevHash,
	} {
		b.WriteString(strconv.Itoa(len(f)))
		b.WriteByte(':')
		b.WriteString(f)
	}
	sum := sha256.Sum256([]byte(b.String()))
	return hex.EncodeToString(sum[:])
}

// Seal sets r's Seq, PrevHash and Hash as the successor of a chain whose last
// record has sequence prevSeq and hash prevHash (0 and Genesis for an empty chain).
func Seal(r *Record, prevSeq int64, prevHash string) {
	r.Seq = prevSeq + 1
	r.PrevHash = prevHash
	r.Hash = ComputeHash(*r, prevHash)
}

// ChainError is what Verify returns: the first record that breaks the chain.
type ChainError struct {
	Seq    int64  // sequence number of the bad record
	Reason string // what is wrong with it
}

func (e *ChainError) Error() string { return fmt.Sprintf("audit record %d%s", e.Seq, e.Reason) }

// Verify checks that records (in sequence order, starting anywhere in the chain)
// link up and that each hash matches its content. It returns nil or a
// *ChainError naming the first bad record.
func Verify(records []Record) error {
	for i, r := range records {
		if i > 0 {
			prev := records[i-1]
			if r.Seq != prev.Seq+1 {
				return &ChainError{r.Seq, fmt.Sprintf(" follows %d: sequence gap", prev.Seq)}
			}
			if r.PrevHash != prev.Hash {
				return &ChainError{r.Seq, fmt.Sprintf(": prev_hash does not match the hash of record %d", prev.Seq)}
			}
		} else if r.Seq == 1 && r.PrevHash != Genesis {
			return &ChainError{1, fmt.Sprintf(": prev_hash is %q, want %q", r.PrevHash, Genesis)}
		}
		if want := ComputeHash(r, r.PrevHash); r.Hash != want {
			return &ChainError{r.Seq, ": content does not match its hash"}
		}
	}
	return nil
}

// VerifyFrom checks records like Verify and also that the first one follows
// the record (prevSeq, prevHash): the last one before them, kept as a
// checkpoint when older records were deleted ({0, Genesis}: none). Its error
// is a *ChainError too.
func VerifyFrom(prevSeq int64, prevHash string, records []Record) error {
	if len(records) == 0 {
		return nil
	}
	first := records[0]
	if first.Seq != prevSeq+1 {
		return &ChainError{first.Seq, fmt.Sprintf(" follows %d: sequence gap", prevSeq)}
	}
	if first.PrevHash != prevHash {
		return &ChainError{first.Seq, fmt.Sprintf(": prev_hash does not match the hash of record %d", prevSeq)}
	}
	return Verify(records)
}
