package webhook

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/store"
	"github.com/simpletuner/simpletuner-orchestration/internal/store/storetest"
	"github.com/simpletuner/simpletuner-orchestration/internal/webhook/spec"
)

// BenchmarkSubmitWithSubscriptions is the median time of a job's submit
// (InsertJob, which writes job.queued's deliveries in its transaction) on
// SQLite with n subscriptions to every event, over 200 submits; nothing
// is sent, so each submit finds the backlog of those before it.
//
//	go test -run '^$' -bench SubmitWithSubscriptions -benchtime 1x ./internal/webhook/
func BenchmarkSubmitWithSubscriptions(b *testing.B) {
	for _, n := range []int{0, 50, 300} {
		b.Run(fmt.Sprintf("subscriptions=%d", n), func(b *testing.B) {
			st := storetest.Open(b, "sqlite")
			opt := fast()
			opt.MaxSubscriptions = max(n, 1)
			svc := New(st, opt, nil)
			for i := range n {
				if _, err := svc.Create(b.Context(), spec.CreateRequest{Name: fmt.Sprintf("s%d", i), URL: "https://hooks.example.com/x",
					Events: []string{"*"}}, "admin:b", ""); err != nil {
					b.Fatal(err)
				}
			}
			var took []time.Duration
			for b.Loop() {
				took = took[:0]
				for range 200 {
					start := time.Now()
					if _, err := st.InsertJob(b.Context(), store.Job{ConfigName: "c"}, nil); err != nil {
						b.Fatal(err)
					}
					took = append(took, time.Since(start))
				}
			}
			slices.Sort(took)
			b.ReportMetric(float64(took[len(took)/2].Microseconds())/1000, "median-ms")
		})
	}
}
