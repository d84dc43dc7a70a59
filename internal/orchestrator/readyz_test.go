package orchestrator_test

import (
	"context"
	"testing"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/store"
	"github.com/simpletuner/simpletuner-orchestration/internal/store/storetest"
)

// hungPing is a store whose Ping ignores its context and waits until
// released, as a database driver does on a connection that went silent.
type hungPing struct {
	store.Store
	release chan struct{}
}

func (h hungPing) Ping(context.Context) error {
	<-h.release
	return nil
}

// A database that holds the ping does not hold /readyz: it answers 503 at
// its own deadline.
func TestReadyzAnswersWhileThePingHangs(t *testing.T) {
	t.Parallel()
	st := hungPing{Store: storetest.Open(t, "sqlite"), release: make(chan struct{})}
	defer close(st.release)
	e := setup(t, st)
	began := time.Now()
	e.Must(e.Do("GET", "/readyz", nil, nil), 503)
	if took := time.Since(began); took > 4*time.Second {
		t.Errorf("/readyz answered after %s", took)
	}
}
