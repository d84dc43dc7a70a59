package orchestrator_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/auth"
	"github.com/simpletuner/simpletuner-orchestration/internal/config"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator"
	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
	"github.com/simpletuner/simpletuner-orchestration/internal/store"
	"github.com/simpletuner/simpletuner-orchestration/internal/testutil"
)

// The callers of the role matrix, in the order of its columns.
const (
	anon       = iota // no credential
	viewerA           // a person, viewer of alpha
	ownerA            // a person, member of alpha, who submitted the job
	memberA           // a person, member of alpha, who did not
	leadA             // a person, lead of alpha
	leadB             // a person, lead of bravo
	fleetAdmin        // a person, admin of no team: the fleet's admin
	serviceA          // a service token of alpha with queue.view
	starToken         // a service token with scope "*"
	adminSock         // the admin socket, as a member of its admin group
	disabled          // a person, member of alpha, since disabled
	callers
)

var callerNames = [callers]string{"anonymous", "viewer of alpha", "owner (member of alpha)", "member of alpha",
	"lead of alpha", "lead of bravo", "fleet admin", "service token of alpha", "token *", "admin socket", "disabled person"}

// hidden is a 404 that must be byte for byte what the same caller gets for
// a job id that does not exist.
const hidden = -404

// matrixGroups map the directory groups of the matrix's people to roles.
var matrixGroups = []config.GroupMapping{
	{Group: "alpha-viewers", Team: "alpha", Role: "viewer"},
	{Group: "alpha-members", Team: "alpha", Role: "member"},
	{Group: "alpha-leads", Team: "alpha", Role: "lead"},
	{Group: "bravo-viewers", Team: "bravo", Role: "viewer"},
	{Group: "bravo-leads", Team: "bravo", Role: "lead"},
	{Group: "fleet-admins", Role: "admin"},
	{Group: "ops", Team: "alpha", Role: "viewer", Scopes: []string{auth.ScopeAdminWorkers}},
}

// matrix is an orchestrator with the teams alpha and bravo, a credential
// for each caller, and alpha's job, submitted by ownerA.
type matrix struct {
	*env
	creds  [callers]string
	sock   *http.Client
	job    string
	nextID int
}

func newMatrix(t *testing.T, st store.Store, mutate ...func(*orchestrator.Options)) *matrix {
	e := setup(t, st, append([]func(*orchestrator.Options){withWalledTeams(), func(o *orchestrator.Options) {
		o.Groups = matrixGroups
		o.AdminGroup = strconv.Itoa(os.Getgid())
		// Every route refuses the anonymous caller and the disabled person.
		o.AuthFailuresPerMinute = 1000
	}}, mutate...)...)
	m := &matrix{env: e}
	m.creds[viewerA] = m.person("alpha-viewers")
	m.creds[ownerA] = m.person("alpha-members")
	m.creds[memberA] = m.person("alpha-members")
	m.creds[leadA] = m.person("alpha-leads")
	m.creds[leadB] = m.person("bravo-leads")
	m.creds[fleetAdmin] = m.person("fleet-admins")
	m.creds[serviceA] = e.scopedToken("alpha-dashboard", "alpha", auth.ScopeQueueView)
	m.creds[starToken] = e.Admin
	m.creds[disabled] = m.person("alpha-members")
	m.disable(m.creds[disabled])
	m.sock = m.adminSocket()
	m.job = m.submitted()
	return m
}

// person records the sign-in of a new person in groups and gives them a
// token, as a sign-in would.
func (m *matrix) person(groups ...string) string {
	m.t.Helper()
	m.nextID++
	id := fmt.Sprintf("p_matrix%05d", m.nextID)
	ctx := context.Background()
	_, _, err := m.st.RecordSignIn(ctx, store.Person{ID: id, Provider: "oidc", Issuer: "https://idp.example.com",
		Subject: id, Username: id, Groups: groups, LastSignIn: time.Now()}, nil)
	if err != nil {
		m.t.Fatal(err)
	}
	token := auth.NewAdminToken()
	tok := store.AdminToken{ID: protocol.NewTokenID(), Name: id, Scopes: []string{auth.ScopeQueueView}, Hash: auth.Hash(token),
		PersonID: id, CreatedAt: time.Now()}
	if err := m.st.CreateAdminToken(ctx, tok, nil); err != nil {
		m.t.Fatal(err)
	}
	return token
}

// disable disables the person whose token this is, through the API.
func (m *matrix) disable(token string) {
	m.t.Helper()
	me := m.Must(m.as(token, "GET", "/api/auth/whoami"), 200).JSON
	m.Must(m.AdminDo("POST", "/api/admin/people/"+me["id"].(string)+"/disable", nil), 200)
}

// adminSocket serves the API on a unix socket whose admin group is this
// process's group, and returns a client of it.
func (m *matrix) adminSocket() *http.Client {
	dir, err := os.MkdirTemp("", "strm")
	if err != nil {
		m.t.Fatal(err)
	}
	m.t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "admin.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		m.t.Fatal(err)
	}
	hs := &http.Server{Handler: m.srv.Handler(), ConnContext: m.srv.AdminConnContext}
	go hs.Serve(ln)
	m.t.Cleanup(func() { hs.Close() })
	return &http.Client{Timeout: eventWait, Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
}

// submitted is a new queued job of alpha, submitted by ownerA.
func (m *matrix) submitted() string {
	m.t.Helper()
	return m.Must(m.submitAs(m.creds[ownerA], nil), 201).JSON["job_id"].(string)
}

// call makes a request as who and returns the status and the body.
func (m *matrix) call(who int, method, path, body string) (int, []byte) {
	m.t.Helper()
	base, client := m.URL, &http.Client{Timeout: eventWait, Transport: testutil.Client.Transport}
	if who == adminSock {
		base, client = "http://local", m.sock
	}
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, _ := http.NewRequest(method, base+path, rd)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if m.creds[who] != "" {
		req.Header.Set("Authorization", "Bearer "+m.creds[who])
	}
	res, err := client.Do(req)
	if err != nil {
		m.t.Fatalf("%s %s as %s: %v", method, path, callerNames[who], err)
	}
	defer res.Body.Close()
	data, err := io.ReadAll(res.Body)
	if err != nil {
		m.t.Fatalf("%s %s as %s: HTTP %d, reading the body: %v", method, path, callerNames[who], res.StatusCode, err)
	}
	return res.StatusCode, data
}

// probe is one request of the matrix: path may hold {job}, alpha's job
// (a fresh one for each caller when fresh is set).
type probe struct {
	method, path, body string
	fresh              bool
	// revokes: the request ends the credential that makes it (logging
	// out), so only the callers without a token of their own to lose
	// make it here; the sign-in tests log out with fresh tokens.
	revokes bool
	want    [callers]int
}

// everyone gets status, whatever credential they send or none.
func everyone(status int) [callers]int {
	var w [callers]int
	for c := range w {
		w[c] = status
	}
	return w
}

// The expectations most routes share: 401 without a credential or for a
// disabled person, ok for those who hold scope, 403 for the rest.
func only(ok int, who ...int) [callers]int {
	var w [callers]int
	for c := range w {
		w[c] = http.StatusForbidden
	}
	w[anon], w[disabled] = http.StatusUnauthorized, http.StatusUnauthorized
	for _, c := range who {
		w[c] = ok
	}
	return w
}

var (
	fleetCallers  = []int{fleetAdmin, starToken, adminSock}
	viewCallers   = []int{viewerA, ownerA, memberA, leadA, leadB, fleetAdmin, serviceA, starToken, adminSock}
	submitCallers = []int{ownerA, memberA, leadA, leadB, fleetAdmin, starToken, adminSock}
	allCallers    = []int{viewerA, ownerA, memberA, leadA, leadB, fleetAdmin, serviceA, starToken, adminSock}
	approvers     = []int{leadA, leadB, fleetAdmin, starToken, adminSock}
)

// readsAlpha: every reader of alpha gets ok; bravo's lead finds no job.
func readsAlpha(ok int) [callers]int {
	w := only(ok, viewCallers...)
	w[leadB] = hidden
	return w
}

// with changes the expectations of some callers.
func with(w [callers]int, status int, who ...int) [callers]int {
	for _, c := range who {
		w[c] = status
	}
	return w
}

// matrixProbes name every route of the admin API by its method and
// router path, with what each caller gets.
func matrixProbes() map[string]probe {
	const nf, ok = http.StatusNotFound, http.StatusOK
	admin := func(status int) [callers]int { return only(status, fleetCallers...) }
	return map[string]probe{
		"GET /api/admin/workers":                        {method: "GET", path: "/api/admin/workers", want: admin(ok)},
		"POST /api/admin/workers":                       {method: "POST", path: "/api/admin/workers", body: `{}`, want: admin(422)},
		"GET /api/admin/workers/:id":                    {method: "GET", path: "/api/admin/workers/w_missing", want: admin(nf)},
		"PATCH /api/admin/workers/:id":                  {method: "PATCH", path: "/api/admin/workers/w_missing", body: `{"labels": {"a": "b"}}`, want: admin(nf)},
		"DELETE /api/admin/workers/:id":                 {method: "DELETE", path: "/api/admin/workers/w_missing", want: admin(nf)},
		"POST /api/admin/workers/:id/drain":             {method: "POST", path: "/api/admin/workers/w_missing/drain", want: admin(nf)},
		"POST /api/admin/workers/:id/resume":            {method: "POST", path: "/api/admin/workers/w_missing/resume", want: admin(nf)},
		"POST /api/admin/workers/:id/token":             {method: "POST", path: "/api/admin/workers/w_missing/token", want: admin(nf)},
		"POST /api/admin/workers/:id/gpus/:index/clear": {method: "POST", path: "/api/admin/workers/w_missing/gpus/0/clear", want: admin(nf)},
		"GET /api/admin/workers/:id/gpu-history":        {method: "GET", path: "/api/admin/workers/w_missing/gpu-history", want: admin(nf)},
		"GET /api/admin/fleet/gpu-history":              {method: "GET", path: "/api/admin/fleet/gpu-history", want: only(ok, viewCallers...)},
		"GET /api/admin/usage":                          {method: "GET", path: "/api/admin/usage", want: only(ok, viewCallers...)},
		"GET /api/admin/audit":                          {method: "GET", path: "/api/admin/audit", want: admin(ok)},
		"GET /api/admin/audit/verify":                   {method: "GET", path: "/api/admin/audit/verify", want: admin(ok)},
		"GET /api/admin/webhooks":                       {method: "GET", path: "/api/admin/webhooks", want: admin(ok)},
		"POST /api/admin/webhooks":                      {method: "POST", path: "/api/admin/webhooks", body: `{}`, want: admin(422)},
		"GET /api/admin/webhooks/:id":                   {method: "GET", path: "/api/admin/webhooks/wh_missing", want: admin(nf)},
		"DELETE /api/admin/webhooks/:id":                {method: "DELETE", path: "/api/admin/webhooks/wh_missing", want: admin(nf)},
		"GET /api/admin/webhooks/:id/deliveries":        {method: "GET", path: "/api/admin/webhooks/wh_missing/deliveries", want: admin(nf)},
		"GET /api/auth/whoami":                          {method: "GET", path: "/api/auth/whoami", want: only(ok, allCallers...)},
		"GET /api/configs":                              {method: "GET", path: "/api/configs", want: only(ok, submitCallers...)},
		"GET /api/admin/tokens":                         {method: "GET", path: "/api/admin/tokens", want: admin(ok)},
		"POST /api/admin/tokens":                        {method: "POST", path: "/api/admin/tokens", body: `{}`, want: admin(422)},
		"DELETE /api/admin/tokens/:id":                  {method: "DELETE", path: "/api/admin/tokens/t_missing", want: admin(nf)},
		"GET /api/admin/people":                         {method: "GET", path: "/api/admin/people", want: admin(ok)},
		"GET /api/admin/people/:id":                     {method: "GET", path: "/api/admin/people/p_missing", want: admin(nf)},
		"POST /api/admin/people/:id/disable":            {method: "POST", path: "/api/admin/people/p_missing/disable", want: admin(nf)},
		"POST /api/admin/people/:id/enable":             {method: "POST", path: "/api/admin/people/p_missing/enable", want: admin(nf)},
		"PUT /api/admin/people/:id/memberships": {method: "PUT", path: "/api/admin/people/p_missing/memberships",
			body: `{"memberships": [{"team": "alpha", "role": "viewer"}]}`, want: admin(nf)},

		// Signing in needs no credential; a token of one's own is a person's.
		"GET /api/auth/providers":      {method: "GET", path: "/api/auth/providers", want: everyone(ok)},
		"POST /api/auth/oidc/exchange": {method: "POST", path: "/api/auth/oidc/exchange", body: `{}`, want: everyone(nf)},
		"POST /api/auth/ldap/login":    {method: "POST", path: "/api/auth/ldap/login", body: `{}`, want: everyone(nf)},
		"DELETE /api/auth/tokens/self": {method: "DELETE", path: "/api/auth/tokens/self", revokes: true, want: with(only(ok, allCallers...), 422, adminSock)},
		"POST /api/auth/tokens":        {method: "POST", path: "/api/auth/tokens", body: `{"name": "mine"}`, want: only(http.StatusCreated, viewerA, ownerA, memberA, leadA, leadB, fleetAdmin)},

		// Approvals: leads decide their teams' requests, admins change rules.
		"GET /api/approvals/requests":             {method: "GET", path: "/api/approvals/requests", want: only(ok, approvers...)},
		"GET /api/approvals/requests/:id":         {method: "GET", path: "/api/approvals/requests/999999", want: only(nf, viewCallers...)},
		"GET /api/approvals/requests/:id/:action": {method: "GET", path: "/api/approvals/requests/pending/count", want: only(ok, approvers...)},
		"POST /api/approvals/requests/:id/:action": {method: "POST", path: "/api/approvals/requests/999999/approve", body: `{}`,
			want: only(nf, approvers...)},
		// alpha's job was never held: its approvers find no request.
		"POST /api/queue/:job_id/approve": {method: "POST", path: "/api/queue/{job}/approve", body: `{}`,
			want: with(only(nf, approvers...), hidden, leadB)},
		"POST /api/queue/:job_id/reject": {method: "POST", path: "/api/queue/{job}/reject", body: `{"reason": "too big"}`,
			want: with(only(nf, approvers...), hidden, leadB)},
		"GET /api/approvals/rules":        {method: "GET", path: "/api/approvals/rules", want: only(ok, viewCallers...)},
		"POST /api/approvals/rules":       {method: "POST", path: "/api/approvals/rules", body: `{}`, want: admin(422)},
		"GET /api/approvals/rules/:id":    {method: "GET", path: "/api/approvals/rules/ar_missing", want: only(nf, viewCallers...)},
		"PATCH /api/approvals/rules/:id":  {method: "PATCH", path: "/api/approvals/rules/ar_missing", body: `{}`, want: admin(nf)},
		"DELETE /api/approvals/rules/:id": {method: "DELETE", path: "/api/approvals/rules/ar_missing", want: admin(nf)},

		// The queue. A submit goes to the caller's own team.
		"POST /api/queue/:job_id": {method: "POST", path: "/api/queue/submit", body: `{"config": {"model_type": "lora"}}`,
			want: only(http.StatusCreated, submitCallers...)},
		"GET /api/queue/:job_id": {method: "GET", path: "/api/queue/{job}", want: readsAlpha(ok)},
		// The fixed name the same route serves beside job ids.
		"GET /api/queue/:job_id stats":     {method: "GET", path: "/api/queue/stats", want: only(ok, viewCallers...)},
		"GET /api/queue":                   {method: "GET", path: "/api/queue", want: only(ok, viewCallers...)},
		"GET /api/queue/:job_id/logs":      {method: "GET", path: "/api/queue/{job}/logs", want: readsAlpha(ok)},
		"GET /api/queue/:job_id/artifacts": {method: "GET", path: "/api/queue/{job}/artifacts", want: readsAlpha(ok)},
		// The job has no artifact: its readers get the artifact's own 404.
		"GET /api/queue/:job_id/artifacts/*path":  {method: "GET", path: "/api/queue/{job}/artifacts/output/model.safetensors", want: readsAlpha(nf)},
		"HEAD /api/queue/:job_id/artifacts/*path": {method: "HEAD", path: "/api/queue/{job}/artifacts/output/model.safetensors", want: readsAlpha(nf)},
		// Cancelling: the owner and those who manage alpha; a teammate, a
		// viewer and a read-only token are refused; bravo finds no job.
		"POST /api/queue/:job_id/cancel": {method: "POST", path: "/api/queue/{job}/cancel", fresh: true,
			want: with(only(ok, ownerA, leadA, fleetAdmin, starToken, adminSock), hidden, leadB)},
	}
}

// adminRoute reports whether a route is the admin API's, not the workers'
// protocol, their uploads or the probes.
func adminRoute(path string) bool {
	for _, other := range []string{"/healthz", "/readyz", "/api/workers/", "/api/cloud/"} {
		if strings.HasPrefix(path, other) {
			return false
		}
	}
	return true
}

// Every caller against every route of the admin API, on both stores. A new
// route fails the test until the matrix says who may use it.
func TestRoleMatrix(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, open func(testing.TB) store.Store) {
		m := newMatrix(t, open(t))
		probes := matrixProbes()
		seen := map[string]bool{}
		for _, rt := range m.srv.Routes() {
			if !adminRoute(rt.Path) {
				continue
			}
			key := rt.Method + " " + rt.Path
			seen[key] = true
			if _, ok := probes[key]; !ok {
				t.Errorf("route %s is not in the role matrix: add what each caller gets", key)
			}
		}
		for name, p := range probes {
			if !seen[routeOf(name)] {
				t.Errorf("the role matrix names %s, which the router does not serve", name)
				continue
			}
			for who := range callers {
				if p.revokes && who != anon && who != disabled && who != adminSock {
					continue
				}
				m.check(t, name, p, who)
			}
		}
	})
}

// routeOf is the route a probe's name names: its method and router path,
// without what follows them ("GET /api/queue/:job_id stats").
func routeOf(name string) string {
	f := strings.Fields(name)
	return f[0] + " " + f[1]
}

// check makes probe p's request as who and compares the answer.
func (m *matrix) check(t *testing.T, key string, p probe, who int) {
	t.Helper()
	job := m.job
	if p.fresh {
		job = m.submitted()
	}
	status, body := m.call(who, p.method, strings.ReplaceAll(p.path, "{job}", job), p.body)
	want := p.want[who]
	if want != hidden {
		if status != want {
			t.Errorf("%s as %s: HTTP %d %s, want %d", key, callerNames[who], status, body, want)
		}
		return
	}
	ustatus, ubody := m.call(who, p.method, strings.ReplaceAll(p.path, "{job}", unknownJob), p.body)
	ubody = bytes.ReplaceAll(ubody, []byte(unknownJob), []byte(job))
	if status != 404 || ustatus != 404 || !bytes.Equal(body, ubody) {
		t.Errorf("%s as %s: HTTP %d %q; for an unknown id HTTP %d %q; want the same 404", key, callerNames[who], status, body, ustatus, ubody)
	}
}

// A log follow re-checks the person as they are now: once they are no
// longer in the job's team the stream ends, even though another team's
// role still grants queue.view.
func TestFollowEndsWhenThePersonLeavesTheJobsTeam(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, open func(testing.TB) store.Store) {
		m := newMatrix(t, open(t), func(o *orchestrator.Options) { o.RecheckInterval = 100 * time.Millisecond })
		token := m.person("alpha-members", "bravo-viewers")
		job := m.Must(m.submitAs(token, nil), 201).JSON["job_id"].(string)
		f, status := m.follow(token, job)
		if status != 200 {
			t.Fatalf("follow of the person's own job: HTTP %d", status)
		}
		me := m.Must(m.as(token, "GET", "/api/auth/whoami"), 200).JSON
		m.Must(m.AdminDo("PUT", "/api/admin/people/"+me["id"].(string)+"/memberships",
			`{"memberships": [{"team": "alpha", "role": "none"}]}`), 200)
		if !f.ended(eventWait) {
			t.Fatal("the stream outlived the person's membership of the job's team")
		}
		if evs := f.events(); len(evs) == 0 || evs[len(evs)-1].Type != "error" {
			t.Fatalf("events %+v; want a closing error event", evs)
		}
		if _, status := m.follow(token, job); status != 404 {
			t.Fatalf("a new follow outside the team: HTTP %d, want 404", status)
		}
	})
}

// A running job of alpha with an artifact and a checkpoint: alpha's viewer
// reads all of it, while to bravo's lead (a person) and bravo's lead token
// every path that names it answers byte for byte as an unknown id does,
// and bravo's lists never mention it.
func TestTeamWallHoldsForPeopleAndTokens(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, open func(testing.TB) store.Store) {
		m := newMatrix(t, open(t))
		a := m.quietAgent("w")
		up := a.take(m.job)["upload_token"].(string)
		m.Must(m.put(up, "output/model.safetensors", strings.NewReader("weights"), 7), 200)
		m.Must(m.commit(up, m.uploadCheckpoint(up, "checkpoint-10", 10, map[string][]byte{"model.safetensors": []byte("w")})), 201)

		viewer := m.creds[viewerA]
		if cp, _ := m.Must(m.as(viewer, "GET", "/api/queue/"+m.job), 200).JSON["checkpoint"].(map[string]any); cp["name"] != "checkpoint-10" {
			t.Fatalf("alpha's viewer does not see the checkpoint: %v", cp)
		}
		if r := m.Must(m.as(viewer, "GET", "/api/queue/"+m.job+"/artifacts/output/model.safetensors"), 200); string(r.Body) != "weights" {
			t.Fatalf("alpha's viewer reads the artifact as %q", r.Body)
		}
		m.Must(m.as(viewer, "HEAD", "/api/queue/"+m.job+"/artifacts/output/model.safetensors"), 200)
		if f, status := m.follow(viewer, m.job); status != 200 {
			t.Fatalf("alpha's viewer follows the log: HTTP %d", status)
		} else {
			f.close()
		}

		outsiders := map[string]string{"bravo's lead": m.creds[leadB], "bravo's lead token": m.scopedToken("bravo-lead", "bravo", "queue.*")}
		paths := []struct{ method, path string }{
			{"GET", "/api/queue/%s"},
			{"GET", "/api/queue/%s/logs"},
			{"GET", "/api/queue/%s/logs?follow=1"},
			{"GET", "/api/queue/%s/artifacts"},
			{"GET", "/api/queue/%s/artifacts/output/model.safetensors"},
			{"HEAD", "/api/queue/%s/artifacts/output/model.safetensors"},
			{"POST", "/api/queue/%s/cancel"},
		}
		for who, token := range outsiders {
			for _, p := range paths {
				unknown := m.as(token, p.method, fmt.Sprintf(p.path, unknownJob))
				got := m.as(token, p.method, fmt.Sprintf(p.path, m.job))
				want := bytes.ReplaceAll(unknown.Body, []byte(unknownJob), []byte(m.job))
				if unknown.Status != 404 || got.Status != 404 || !bytes.Equal(got.Body, want) {
					t.Errorf("%s: %s %s of alpha's job: HTTP %d %q; an unknown id: HTTP %d %q",
						who, p.method, p.path, got.Status, got.Body, unknown.Status, unknown.Body)
				}
			}
			for _, list := range []string{"/api/queue", "/api/queue?status=running", "/api/admin/usage"} {
				body := m.Must(m.as(token, "GET", list), 200).Body
				if bytes.Contains(body, []byte(m.job)) || bytes.Contains(body, []byte("checkpoint-10")) || bytes.Contains(body, []byte(`"alpha"`)) {
					t.Errorf("%s: %s shows alpha's job: %s", who, list, body)
				}
			}
		}
		if st := m.Job(m.job)["status"]; st != "running" {
			t.Fatalf("the refused cancels changed the job: %v", st)
		}
	})
}

// A person acts in each team with that team's role: a lead of alpha who is a
// viewer of bravo cancels any of alpha's jobs but only reads bravo's; the
// extra scopes of a group mapping hold beside the role, and no further.
func TestAPersonActsInEachTeamWithItsRole(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, open func(testing.TB) store.Store) {
		m := newMatrix(t, open(t))
		both := m.person("alpha-leads", "bravo-viewers")
		bravoJob := m.Must(m.submitAs(m.scopedToken("bravo-ci", "bravo", "queue.submit"), nil), 201).JSON["job_id"].(string)

		m.Must(m.as(both, "GET", "/api/queue/"+bravoJob), 200)
		if r := m.as(both, "POST", "/api/queue/"+bravoJob+"/cancel"); r.Status != 403 {
			t.Fatalf("a viewer of bravo cancelling bravo's job: HTTP %d %s, want 403", r.Status, r.Body)
		}
		if st := m.Job(bravoJob)["status"]; st != "queued" {
			t.Fatalf("the refused cancel changed bravo's job: %v", st)
		}
		m.Must(m.as(both, "POST", "/api/queue/"+m.job+"/cancel"), 200)
		if ids := jobIDsOf(m.Must(m.as(both, "GET", "/api/queue"), 200).JSON); len(ids) != 2 {
			t.Fatalf("the list of a person in alpha and bravo: %v", ids)
		}

		ops := m.person("ops")
		m.Must(m.as(ops, "GET", "/api/admin/workers"), 200)
		m.Must(m.as(ops, "GET", "/api/queue/"+m.job), 200)
		m.Must(m.as(ops, "GET", "/api/queue/"+bravoJob), 404)
		m.Must(m.as(ops, "GET", "/api/admin/audit"), 403)
		m.Must(m.as(ops, "POST", "/api/queue/"+bravoJob+"/cancel"), 403)
	})
}
