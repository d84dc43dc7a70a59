package adminapi

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/auth"
	"github.com/simpletuner/simpletuner-orchestration/internal/config"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator/fairshare"
	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
	"github.com/simpletuner/simpletuner-orchestration/internal/store"
)

// The ids of another team's jobs in a wait or failure sentence ("held for
// job X", "preempted by X") are hidden from a caller who cannot see that
// team; its own team's ids and the fleet's view stay as they are.
func TestOtherTeamsJobIDsAreRedacted(t *testing.T) {
	a, st := newTestAPI(t)
	cfg := config.DefaultOrchestrator()
	cfg.Teams = []config.TeamConfig{{Name: "alpha", Share: 1}, {Name: "bravo", Share: 1}}
	a.SetOptions(Options{Teams: fairshare.PolicyFrom(cfg)})
	insert := func(team string) string {
		j := store.Job{ID: protocol.NewJobID(), Config: json.RawMessage(`{}`), Target: protocol.TargetAuto,
			Status: protocol.JobQueued, Team: team, SubmittedBy: "admin:t", CreatedAt: time.Now(), UpdatedAt: time.Now()}
		if _, err := st.InsertJob(t.Context(), j, nil); err != nil {
			t.Fatal(err)
		}
		return j.ID
	}
	own, other := insert("alpha"), insert("bravo")
	text := "preempted by " + other + "; the worker is held for job " + own
	alpha := Caller{Principal: auth.Principal{Kind: auth.KindAdminToken, ID: "a", Team: "alpha", Scopes: []string{auth.ScopeQueueView}}}
	want := "preempted by " + hiddenJob + "; the worker is held for job " + own
	if got := a.redactJobIDs(t.Context(), alpha, text); got != want {
		t.Fatalf("alpha reads %q, want %q", got, want)
	}
	fleet := Caller{Principal: auth.Principal{Kind: auth.KindAdminToken, ID: "f", Team: "alpha", Scopes: []string{auth.ScopeAll}}}
	if got := a.redactJobIDs(t.Context(), fleet, text); got != text {
		t.Fatalf("the fleet reads %q, want %q", got, text)
	}
	a.SetOptions(Options{Teams: fairshare.PolicyFrom(cfg), Visibility: "all"})
	if got := a.redactJobIDs(t.Context(), alpha, text); got != text {
		t.Fatalf("under visibility all alpha reads %q, want %q", got, text)
	}
}
