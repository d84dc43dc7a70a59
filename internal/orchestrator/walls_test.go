package orchestrator_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"testing"

	"github.com/simpletuner/simpletuner-orchestration/internal/config"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator/orchtest"
	"github.com/simpletuner/simpletuner-orchestration/internal/store"
	"github.com/simpletuner/simpletuner-orchestration/internal/testutil"
)

// withWalledTeams configures the teams alpha and bravo, and mod's changes.
func withWalledTeams(mod ...func(*config.Orchestrator)) func(*orchestrator.Options) {
	return withTeams(append([]func(*config.Orchestrator){func(c *config.Orchestrator) {
		c.Teams = []config.TeamConfig{{Name: "alpha", Share: 1}, {Name: "bravo", Share: 1}}
	}}, mod...)...)
}

// scopedToken creates an admin token of team with scopes.
func (e *env) scopedToken(name, team string, scopes ...string) string {
	e.t.Helper()
	r := e.Must(e.AdminDo("POST", "/api/admin/tokens", map[string]any{"name": name, "scopes": scopes, "team": team}), 201)
	return r.JSON["token"].(string)
}

// as makes a request with token. A body it cannot read whole within
// eventWait (a log follow let through the wall streams on) fails the test.
func (e *env) as(token, method, path string) orchtest.Reply {
	e.t.Helper()
	req, _ := http.NewRequest(method, e.URL+path, nil)
	req.Header.Set("Authorization", "Bearer "+token)
	res, err := (&http.Client{Timeout: eventWait, Transport: testutil.Client.Transport}).Do(req)
	if err != nil {
		e.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer res.Body.Close()
	data, err := io.ReadAll(res.Body)
	if err != nil {
		e.t.Fatalf("%s %s: HTTP %d, reading the body: %v", method, path, res.StatusCode, err)
	}
	r := orchtest.Reply{Status: res.StatusCode, Header: res.Header, Body: data}
	_ = json.Unmarshal(data, &r.JSON)
	return r
}

// unknownJob is an id no job has, of the shape of real ones.
const unknownJob = "j_zzzzzzzzzzzz"

// Every path that names a job answers a token of another team exactly as it
// answers an id that does not exist; a fleet token still reaches the job.
func TestTeamsAreWalledOff(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, open func(testing.TB) store.Store) {
		e := setup(t, open(t), withWalledTeams())
		alpha := e.scopedToken("alpha-ci", "alpha", "queue.view", "queue.submit", "queue.cancel")
		bravo := e.scopedToken("bravo-ci", "bravo", "queue.view", "queue.submit", "queue.cancel")
		bravoJob := e.Must(e.submitAs(bravo, nil), 201).JSON["job_id"].(string)
		alphaJob := e.Must(e.submitAs(alpha, nil), 201).JSON["job_id"].(string)

		paths := []struct{ method, path string }{
			{"GET", "/api/queue/%s"},
			{"GET", "/api/queue/%s/logs"},
			{"GET", "/api/queue/%s/logs?follow=1"},
			{"GET", "/api/queue/%s/artifacts"},
			{"GET", "/api/queue/%s/artifacts/output/model.safetensors"},
			{"HEAD", "/api/queue/%s/artifacts/output/model.safetensors"},
			{"POST", "/api/queue/%s/cancel"},
		}
		for _, p := range paths {
			unknown := e.as(alpha, p.method, fmt.Sprintf(p.path, unknownJob))
			hidden := e.as(alpha, p.method, fmt.Sprintf(p.path, bravoJob))
			want := bytes.ReplaceAll(unknown.Body, []byte(unknownJob), []byte(bravoJob))
			if unknown.Status != 404 || hidden.Status != 404 || !bytes.Equal(hidden.Body, want) {
				t.Errorf("%s %s of another team's job: HTTP %d %q; an unknown id: HTTP %d %q",
					p.method, p.path, hidden.Status, hidden.Body, unknown.Status, unknown.Body)
			}
		}
		// The fleet reaches the job on every path.
		e.Job(bravoJob)
		e.Must(e.AdminDo("GET", "/api/queue/"+bravoJob+"/logs", nil), 200)
		e.Must(e.AdminDo("GET", "/api/queue/"+bravoJob+"/artifacts", nil), 200)
		if r := e.AdminDo("GET", "/api/queue/"+bravoJob+"/artifacts/output/model.safetensors", nil); r.Status != 404 ||
			!bytes.Contains(r.Body, []byte("artifact not found")) {
			t.Errorf("fleet artifact GET: HTTP %d %s, want the artifact's own 404", r.Status, r.Body)
		}
		if f, status := e.follow(e.Admin, bravoJob); status != 200 {
			t.Errorf("fleet log follow: HTTP %d", status)
		} else {
			f.close()
		}

		// Lists and usage keep to the caller's team; the fleet's has both.
		list := e.Must(e.as(alpha, "GET", "/api/queue"), 200).JSON
		if ids := jobIDsOf(list); len(ids) != 1 || ids[0] != alphaJob || list["total"] != float64(1) {
			t.Errorf("alpha's list: %v", list)
		}
		if ids := jobIDsOf(e.Must(e.Queue(""), 200).JSON); len(ids) != 2 {
			t.Errorf("fleet list: %v", ids)
		}
		usage := e.Must(e.as(alpha, "GET", "/api/admin/usage"), 200).JSON
		for _, row := range usage["teams"].([]any) {
			if team := row.(map[string]any)["team"]; team != "alpha" {
				t.Errorf("alpha's usage shows team %v", team)
			}
		}
		e.Must(e.as(alpha, "GET", "/api/queue/"+alphaJob), 200)
		e.Must(e.Cancel(bravoJob), 200)
	})
}

// A member cancels its own jobs only; a lead (queue.manage) any of its team's.
func TestOnlyALeadCancelsATeammatesJob(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, open func(testing.TB) store.Store) {
		e := setup(t, open(t), withWalledTeams())
		ann := e.scopedToken("ann", "alpha", "queue.view", "queue.submit", "queue.cancel")
		bob := e.scopedToken("bob", "alpha", "queue.view", "queue.submit", "queue.cancel")
		lead := e.scopedToken("lead", "alpha", "queue.*")
		annsJob := e.Must(e.submitAs(ann, nil), 201).JSON["job_id"].(string)
		bobsJob := e.Must(e.submitAs(bob, nil), 201).JSON["job_id"].(string)

		if r := e.as(bob, "POST", "/api/queue/"+annsJob+"/cancel"); r.Status != 403 {
			t.Fatalf("a member cancelling a teammate's job: HTTP %d %s, want 403", r.Status, r.Body)
		}
		if st := e.Job(annsJob)["status"]; st != "queued" {
			t.Fatalf("the refused cancel changed the job: %v", st)
		}
		e.Must(e.as(bob, "POST", "/api/queue/"+bobsJob+"/cancel"), 200)
		e.Must(e.as(lead, "POST", "/api/queue/"+annsJob+"/cancel"), 200)
	})
}

// visibility = "all" opens reads across teams, not cancels.
func TestVisibilityAllOpensReadsOnly(t *testing.T) {
	t.Parallel()
	e := setup(t, backends["sqlite"](t), withWalledTeams(), func(o *orchestrator.Options) { o.Visibility = "all" })
	alpha := e.scopedToken("alpha-ci", "alpha", "queue.*")
	bravo := e.scopedToken("bravo-ci", "bravo", "queue.*")
	bravoJob := e.Must(e.submitAs(bravo, nil), 201).JSON["job_id"].(string)
	e.Must(e.as(alpha, "GET", "/api/queue/"+bravoJob), 200)
	if ids := jobIDsOf(e.Must(e.as(alpha, "GET", "/api/queue"), 200).JSON); len(ids) != 1 {
		t.Fatalf("alpha's list under visibility all: %v", ids)
	}
	if r := e.as(alpha, "POST", "/api/queue/"+bravoJob+"/cancel"); r.Status != 403 {
		t.Fatalf("cancel across teams under visibility all: HTTP %d %s, want 403", r.Status, r.Body)
	}
}

func jobIDsOf(list map[string]any) []string {
	var ids []string
	entries, _ := list["entries"].([]any)
	for _, en := range entries {
		ids = append(ids, en.(map[string]any)["job_id"].(string))
	}
	return ids
}
