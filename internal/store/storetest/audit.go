package storetest

import (
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/audit"
	"github.com/simpletuner/simpletuner-orchestration/internal/lifecycle"
	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
	"github.com/simpletuner/simpletuner-orchestration/internal/store"
)

var auditTests = []test{
	{"AuditAppendList", testAuditAppendList},
	{"AuditNormalizes", testAuditNormalizes},
	{"AuditConcurrent", testAuditConcurrent},
}

func testAuditAppendList(t *testing.T, s store.Store) {
	var want []audit.Record
	for i := 0; i < 5; i++ {
		r := audit.Record{Time: at(time.Duration(i) * time.Second), Actor: "admin:a", ActorIP: "10.0.0.1",
			Action: "worker.create", TargetType: "worker", TargetID: "w_1", Outcome: audit.Success,
			Details: json.RawMessage(`{"name": "box",  "i":` + string(rune('0'+i)) + `}`)}
		noErr(t, s.AppendAudit(t.Context(), r), "AppendAudit")
		want = append(want, r)
	}
	got := chain(t, s)
	if len(got) != 5 {
		t.Fatalf("%d records, want 5", len(got))
	}
	for i, r := range got {
		w := want[i]
		w.Seq, w.PrevHash, w.Hash = r.Seq, r.PrevHash, r.Hash
		equal(t, r, w, "record")
		if i == 0 && r.PrevHash != audit.Genesis {
			t.Fatalf("first record's prev_hash %q", r.PrevHash)
		}
	}
	page, err := s.ListAudit(t.Context(), 2, 2)
	noErr(t, err, "ListAudit")
	equal(t, page, got[2:4], "ListAudit(since 2, limit 2)")
	page, err = s.ListAudit(t.Context(), 5, 0)
	noErr(t, err, "ListAudit")
	if len(page) != 0 {
		t.Fatalf("ListAudit after the last record: %+v", page)
	}
	if err := audit.Verify(got[3:]); err != nil {
		t.Fatalf("a tail of the chain must verify: %v", err)
	}
}

func testAuditNormalizes(t *testing.T, s store.Store) {
	// Nanoseconds, a zone and missing details: the stored record must still verify.
	loc := time.FixedZone("x", 3600)
	r := audit.Record{Time: time.Date(2031, 5, 6, 7, 8, 9, 123456789, loc), Actor: "system", Action: "x.y"}
	noErr(t, s.AppendAudit(t.Context(), r), "AppendAudit")
	noErr(t, s.AppendAudit(t.Context(), audit.Record{Actor: "system", Action: "no.time"}), "AppendAudit without time")
	got := chain(t, s)
	if !got[0].Time.Equal(time.Date(2031, 5, 6, 6, 8, 9, 123456000, time.UTC)) || string(got[0].Details) != "{}" {
		t.Fatalf("normalized record: %+v", got[0])
	}
	if got[1].Time.IsZero() {
		t.Fatal("a record without time must be stamped")
	}
	if err := s.AppendAudit(t.Context(), audit.Record{Actor: "system"}); err == nil {
		t.Fatal("a record without an action must be refused")
	}
}

// testAuditConcurrent appends from many goroutines, alone and inside other
// transactions; the chain must stay linear.
func testAuditConcurrent(t *testing.T, s store.Store) {
	const goroutines, each = 16, 6
	var ids []string
	for i := 0; i < goroutines; i++ {
		ids = append(ids, newJob(t, s).ID)
	}
	var wg sync.WaitGroup
	errs := make(chan error, goroutines*each)
	for g := 0; g < goroutines; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				var err error
				if i == each-1 && g%2 == 0 {
					_, err = s.TransitionJob(t.Context(), store.JobTransition{JobID: ids[g], From: protocol.JobQueued,
						Step: lifecycle.Step{To: protocol.JobCancelled, By: lifecycle.Cancel}, Now: t0, Audit: rec("job.cancel")})
				} else {
					err = s.AppendAudit(t.Context(), *rec("test.concurrent"))
				}
				if err != nil {
					errs <- err
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if n := len(chain(t, s)); n != goroutines*each {
		t.Fatalf("%d records, want %d", n, goroutines*each)
	}
}
