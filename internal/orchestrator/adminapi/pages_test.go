package adminapi

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/simpletuner/simpletuner-orchestration/internal/api"
)

// FuzzJobListQuery: any query string is a job filter or a 422 naming the
// parameter, never a panic; a cursor this orchestrator made reads back as
// it was made.
func FuzzJobListQuery(f *testing.F) {
	for _, s := range []string{"limit=50", "cursor=" + encodeCursor(newestFirst, 42), "cursor=MS5vLjc", "order=oldest&offset=3",
		"status=active&worker_id=w_x", "cursor=%ff%fe", "cursor=MS5uLi0x", "limit=0", "order=sideways"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		r := httptest.NewRequest(http.MethodGet, "/api/queue", nil)
		r.URL.RawQuery = raw
		q, err := jobsQuery(nil, r, nil)
		var lq jobListQuery
		if err == nil {
			lq, err = parseJobList(q)
		}
		if err != nil {
			ae, ok := err.(*api.Error)
			if !ok || ae.Status != 422 || ae.Body.Detail == "" {
				t.Fatalf("query %q: %v", raw, err)
			}
			return
		}
		if lq.filter.Limit < 1 || lq.filter.Limit > 200 || lq.filter.AfterSeq < 0 || (lq.order != newestFirst && lq.order != oldestFirst) {
			t.Fatalf("query %q gave %+v", raw, lq)
		}
		if lq.filter.AfterSeq > 0 {
			order, seq, ok := decodeCursor(encodeCursor(lq.order, lq.filter.AfterSeq))
			if !ok || order != lq.order || seq != lq.filter.AfterSeq {
				t.Fatalf("cursor round trip of %+v: %s %d %v", lq, order, seq, ok)
			}
		}
	})
}
