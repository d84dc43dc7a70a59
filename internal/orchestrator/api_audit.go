package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/julienschmidt/httprouter"

	"github.com/simpletuner/simpletuner-orchestration/internal/audit"
	"github.com/simpletuner/simpletuner-orchestration/internal/auth"
	"github.com/simpletuner/simpletuner-orchestration/internal/store"
)

// listAudit answers GET /api/admin/audit: records after a sequence number
// (?since=, or the reply's "next" given back as ?cursor=), oldest first, read
// by the primary key from there on. Asked for an order or a filter, it lists
// newest first instead (listAuditNewest). Once retention has deleted old
// records the reply names the checkpoint: the last record deleted, which the
// first record left links to.
func (s *Server) listAudit(w http.ResponseWriter, r *http.Request, _ httprouter.Params, _ auth.Principal) error {
	if wantsAuditFilter(r) {
		return s.listAuditNewest(w, r)
	}
	since, limit, err := auditPageArgs(r, "since", 0)
	if err != nil {
		return err
	}
	recs, err := s.store.ListAudit(r.Context(), since, limit)
	if err != nil {
		return err
	}
	reply := auditPage(recs, limit)
	cp, _, err := s.store.AuditBounds(r.Context())
	if err != nil {
		return err
	}
	if cp.Seq > 0 {
		reply["checkpoint"] = cp
	}
	writeJSON(w, http.StatusOK, reply)
	return nil
}

// auditPageArgs reads where an audit page starts (the query parameter
// param, or a previous reply's "next" sent back as ?cursor=, which is never
// below minCursor) and how many records it holds.
func auditPageArgs(r *http.Request, param string, minCursor int64) (from int64, limit int, err error) {
	n, err := queryInt(r, param, 0, 0, 1<<62)
	if err != nil {
		return 0, 0, err
	}
	from = int64(n)
	if c := r.URL.Query().Get("cursor"); c != "" {
		from, err = strconv.ParseInt(c, 10, 64)
		if err != nil || from < minCursor {
			return 0, 0, invalid("query parameter \"cursor\" is not a cursor this orchestrator gave out; send back the \"next\" of the previous page")
		}
	}
	limit, err = queryInt(r, "limit", 100, 1, 1000)
	return from, limit, err
}

// auditPage is a page of audit records as both listings answer it: a full
// page says where the next one starts.
func auditPage(recs []audit.Record, limit int) map[string]any {
	if recs == nil {
		recs = []audit.Record{}
	}
	reply := map[string]any{"records": recs, "count": len(recs)}
	if len(recs) == limit {
		reply["next"] = strconv.FormatInt(recs[len(recs)-1].Seq, 10)
	}
	return reply
}

// auditVerdict is the reply of GET /api/admin/audit/verify.
type auditVerdict struct {
	OK         bool            `json:"ok"`
	Records    int64           `json:"records"`
	FirstSeq   int64           `json:"first_seq,omitempty"`
	LastSeq    int64           `json:"last_seq,omitempty"`
	LastHash   string          `json:"last_hash,omitempty"`
	Checkpoint store.AuditLink `json:"checkpoint"`
	Head       store.AuditLink `json:"head"`
	Error      string          `json:"error,omitempty"`
	// The same walk in the dashboard's terms: records checked and intact,
	// the last of them, and the first record that breaks the chain.
	Checked  int64 `json:"checked"`
	HeadSeq  int64 `json:"head_seq"`
	BrokenAt int64 `json:"broken_at,omitempty"`
}

// verifyPage is how many records the verification reads at a time.
const verifyPage = 1000

// verifyAudit answers GET /api/admin/audit/verify: it walks the whole chain
// from the checkpoint (or its start) to the head and says whether every
// record's hash matches its content and links to the one before. It reads
// every record, so it takes time in proportion to the log (about a second
// per million records here); the answer is 200 either way, with ok false and
// the first bad record named when the chain is broken.
func (s *Server) verifyAudit(w http.ResponseWriter, r *http.Request, _ httprouter.Params, _ auth.Principal) error {
	v, err := s.verifyChain(r.Context())
	if err != nil {
		return err
	}
	v.Checked, v.HeadSeq = v.Records, v.LastSeq
	writeJSON(w, http.StatusOK, v)
	return nil
}

func (s *Server) verifyChain(ctx context.Context) (auditVerdict, error) {
	var v auditVerdict
	cp, head, err := s.store.AuditBounds(ctx)
	if err != nil {
		return v, err
	}
	v.Checkpoint, v.Head = cp, head
	prevSeq, prevHash := cp.Seq, cp.Hash
	for {
		recs, err := s.store.ListAudit(ctx, prevSeq, verifyPage)
		if err != nil {
			return v, err
		}
		if len(recs) == 0 {
			break
		}
		if recs[0].Seq != prevSeq+1 {
			// Retention may have moved the checkpoint past where this walk
			// was: go on from the new one.
			ncp, _, err := s.store.AuditBounds(ctx)
			if err != nil {
				return v, err
			}
			if ncp.Seq >= prevSeq && recs[0].Seq == ncp.Seq+1 {
				prevSeq, prevHash = ncp.Seq, ncp.Hash
				v.Checkpoint = ncp
			}
		}
		if err := audit.VerifyFrom(prevSeq, prevHash, recs); err != nil {
			var ce *audit.ChainError
			if !errors.As(err, &ce) {
				return v, err
			}
			v.Error, v.BrokenAt = ce.Error(), ce.Seq
			v.Records += intactBefore(recs, ce.Seq)
			return v, nil
		}
		for _, rec := range recs {
			if rec.Seq == head.Seq && rec.Hash != head.Hash {
				v.Error, v.BrokenAt = fmt.Sprintf("audit record %d does not match the chain head the database keeps", rec.Seq), rec.Seq
				v.Records += intactBefore(recs, rec.Seq)
				return v, nil
			}
		}
		if v.FirstSeq == 0 {
			v.FirstSeq = recs[0].Seq
		}
		last := recs[len(recs)-1]
		v.Records += int64(len(recs))
		v.LastSeq, v.LastHash = last.Seq, last.Hash
		prevSeq, prevHash = last.Seq, last.Hash
	}
	if prevSeq < head.Seq {
		v.BrokenAt = prevSeq + 1
		v.Error = fmt.Sprintf("the log ends at record %d but the chain head is record %d: the newest records are missing", prevSeq, head.Seq)
		return v, nil
	}
	v.OK = true
	return v, nil
}

// intactBefore counts the records of a page before the one numbered seq.
func intactBefore(recs []audit.Record, seq int64) int64 {
	var n int64
	for _, rec := range recs {
		if rec.Seq >= seq {
			break
		}
		n++
	}
	return n
}
