package adminapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/julienschmidt/httprouter"

	"github.com/simpletuner/simpletuner-orchestration/internal/api"
	"github.com/simpletuner/simpletuner-orchestration/internal/audit"
	"github.com/simpletuner/simpletuner-orchestration/internal/auth"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator/web"
	"github.com/simpletuner/simpletuner-orchestration/internal/store"
)

// auditQuery reads GET /api/admin/audit's query: since (or a previous
// reply's "next" as ?cursor=), limit; with order=newest or a filter (actor,
// action, target, before) the newest-first listing.
func auditQuery(_ http.ResponseWriter, r *http.Request, _ httprouter.Params) (api.AuditQuery, error) {
	q := r.URL.Query()
	out := api.AuditQuery{Newest: q.Has("order") || q.Has("actor") || q.Has("action") || q.Has("target") || q.Has("before"),
		Actor: strings.TrimSpace(q.Get("actor")), Action: strings.TrimSpace(q.Get("action")), Target: strings.TrimSpace(q.Get("target"))}
	if o := q.Get("order"); o != "" && o != "newest" {
		return out, web.Invalid("query parameter \"order\" must be \"newest\" (or absent); got %q", o)
	}
	param, minCursor := "since", int64(0)
	if out.Newest {
		// A previous page's "next" continues back from its last record.
		param, minCursor = "before", 1
	}
	n, err := queryInt(r, param, 0, 0, 1<<62)
	if err != nil {
		return out, err
	}
	from := int64(n)
	if c := q.Get("cursor"); c != "" {
		from, err = strconv.ParseInt(c, 10, 64)
		if err != nil || from < minCursor {
			return out, web.Invalid("query parameter \"cursor\" is not a cursor this orchestrator gave out; send back the \"next\" of the previous page")
		}
	}
	if out.Newest {
		out.Before = from
	} else {
		out.Since = from
	}
	out.Limit, err = queryInt(r, "limit", 100, 1, 1000)
	return out, err
}

// Audit is a page of the audit log: records after Since, oldest first,
// read by the primary key from there on; asked for the newest (a filter), the
// records before Before, newest first. Once retention has deleted old
// records the oldest-first listing names the checkpoint: the last record
// deleted, which the first record left links to.
func (a *API) Audit(ctx context.Context, q api.AuditQuery) (api.AuditPage, error) {
	if _, err := authorize(ctx, auth.ScopeAdminAudit); err != nil {
		return api.AuditPage{}, err
	}
	if q.Limit <= 0 {
		q.Limit = 100
	}
	if q.Newest {
		recs, err := a.store.ListAuditNewest(ctx, store.AuditFilter{Actor: q.Actor, Action: q.Action, TargetID: q.Target,
			BeforeSeq: q.Before, Limit: q.Limit})
		return auditPage(recs, q.Limit), err
	}
	recs, err := a.store.ListAudit(ctx, q.Since, q.Limit)
	if err != nil {
		return api.AuditPage{}, err
	}
	reply := auditPage(recs, q.Limit)
	cp, _, err := a.store.AuditBounds(ctx)
	if err != nil {
		return api.AuditPage{}, err
	}
	if cp.Seq > 0 {
		link := auditLink(cp)
		reply.Checkpoint = &link
	}
	return reply, nil
}

// auditPage is a page of audit records: a full page says where the next
// one starts.
func auditPage(recs []audit.Record, limit int) api.AuditPage {
	if recs == nil {
		recs = []audit.Record{}
	}
	reply := api.AuditPage{Records: recs, Count: len(recs)}
	if len(recs) == limit {
		next := strconv.FormatInt(recs[len(recs)-1].Seq, 10)
		reply.Next = &next
	}
	return reply
}

func auditLink(l store.AuditLink) api.AuditLink {
	return api.AuditLink{Seq: l.Seq, Hash: l.Hash, Time: l.Time}
}

// verifyPage is how many records the verification reads at a time.
const verifyPage = 1000

// VerifyAudit answers GET /api/admin/audit/verify: it walks the whole chain
// from the checkpoint (or its start) to the head and says whether every
// record's hash matches its content and links to the one before. It reads
// every record, so it takes time in proportion to the log (about a second
// per million records here); the answer is 200 either way, with ok false and
// the first bad record named when the chain is broken.
func (a *API) VerifyAudit(ctx context.Context, _ struct{}) (api.AuditVerdict, error) {
	if _, err := authorize(ctx, auth.ScopeAdminAudit); err != nil {
		return api.AuditVerdict{}, err
	}
	v, err := a.verifyChain(ctx)
	if err != nil {
		return api.AuditVerdict{}, err
	}
	v.Checked, v.HeadSeq = v.Records, v.LastSeq
	return v, nil
}

func (a *API) verifyChain(ctx context.Context) (api.AuditVerdict, error) {
	var v api.AuditVerdict
	cp, head, err := a.store.AuditBounds(ctx)
	if err != nil {
		return v, err
	}
	v.Checkpoint, v.Head = auditLink(cp), auditLink(head)
	prevSeq, prevHash := cp.Seq, cp.Hash
	for {
		recs, err := a.store.ListAudit(ctx, prevSeq, verifyPage)
		if err != nil {
			return v, err
		}
		if len(recs) == 0 {
			break
		}
		if recs[0].Seq != prevSeq+1 {
			// Retention may have moved the checkpoint past where this walk
			// was: go on from the new one.
			ncp, _, err := a.store.AuditBounds(ctx)
			if err != nil {
				return v, err
			}
			if ncp.Seq >= prevSeq && recs[0].Seq == ncp.Seq+1 {
				prevSeq, prevHash = ncp.Seq, ncp.Hash
				v.Checkpoint = auditLink(ncp)
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
