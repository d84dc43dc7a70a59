package webhook

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/store"
	"github.com/simpletuner/simpletuner-orchestration/internal/store/storetest"
	"github.com/simpletuner/simpletuner-orchestration/internal/testutil"
	"github.com/simpletuner/simpletuner-orchestration/internal/webhook/spec"
)

// firstAttempt subscribes url to every event, makes one event and returns
// the delivery once its first request is recorded.
func firstAttempt(t *testing.T, url string) spec.Delivery {
	t.Helper()
	st := storetest.Open(t, "sqlite")
	svc := start(t, st, fast())
	wh, err := svc.Create(t.Context(), spec.CreateRequest{Name: "probe", URL: url, Events: []string{"*"}}, "admin:t", "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.InsertJob(t.Context(), store.Job{ConfigName: "c"}, nil); err != nil {
		t.Fatal(err)
	}
	var ds []spec.Delivery
	testutil.Eventually(t, 90*time.Second, "a recorded request", func() bool {
		ds, err = svc.Deliveries(t.Context(), wh.ID, store.DeliveryFilter{}, false)
		return err == nil && len(ds) == 1 && ds[0].Attempts > 0
	})
	return ds[0]
}

// What a receiver answers never reaches the delivery log: a URL pointed at
// an internal service must not read its answers back. The status and the
// body's length are recorded.
func TestAnswerBodyNotLogged(t *testing.T) {
	t.Parallel()
	const answer = "instance-secret: AKIAEXAMPLE0123456789"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusForbidden)
		_, _ = w.Write([]byte(answer))
	}))
	t.Cleanup(srv.Close)
	d := firstAttempt(t, srv.URL+"/hook")
	if d.LastStatus != http.StatusForbidden || d.LastError != "HTTP 403, a body of 38 bytes" {
		t.Fatalf("delivery log: status %d, %q", d.LastStatus, d.LastError)
	}
	if strings.Contains(d.LastError, "AKIA") || strings.Contains(d.LastError, "instance") {
		t.Fatalf("the answer's body reached the delivery log: %q", d.LastError)
	}
}

// A receiver answering with a header of 1 MiB fails the request once
// MaxResponseHeader is read, instead of being buffered whole.
func TestHugeAnswerHeaderRefused(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Padding", strings.Repeat("a", 1<<20))
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(srv.Close)
	d := firstAttempt(t, srv.URL+"/hook")
	if d.State != store.DeliveryPending || d.LastStatus != 0 ||
		!strings.Contains(d.LastError, "server response headers exceeded 16384 bytes") {
		t.Fatalf("a 1 MiB answer header: state %s, status %d, %q", d.State, d.LastStatus, d.LastError)
	}
}
