package dashboard

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/auth"
	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
	"github.com/simpletuner/simpletuner-orchestration/internal/store"
	"github.com/simpletuner/simpletuner-orchestration/internal/testutil"
)

// api calls the orchestrator's HTTP API with a header credential.
func (s *site) api(method, path, header, value string, body any) (int, map[string]any) {
	s.t.Helper()
	r := s.orch.Do(method, path, map[string]string{header: value}, body)
	return r.Status, r.JSON
}

func (s *site) adminAPI(method, path string, body any) (int, map[string]any) {
	return s.api(method, path, "Authorization", "Bearer "+s.admin, body)
}

// registeredWorker creates a worker and registers it like workerd would (protocol 2, GPUs, labels).
func (s *site) registeredWorker(name string) (id, token string) {
	s.t.Helper()
	st, m := s.adminAPI("POST", "/api/admin/workers", map[string]any{"name": name, "labels": map[string]string{"pool": "a"}})
	if st != 201 {
		s.t.Fatalf("create worker: %d %v", st, m)
	}
	id, token = m["worker_id"].(string), m["token"].(string)
	gpu := map[string]any{"name": "NVIDIA A100", "count": 1, "vram_gb": 80,
		"devices": []map[string]any{{"index": 0, "uuid": "GPU-aaa", "name": "NVIDIA A100", "memory_mib": 81920}}}
	if st, m := s.api("POST", "/api/workers/register", "X-Worker-Token", token,
		map[string]any{"name": name, "gpu_info": gpu, "persistent": true, "protocol": 2, "version": "1.2.3"}); st != 200 {
		s.t.Fatalf("register: %d %v", st, m)
	}
	return id, token
}

func TestSignInSessionAndSignOut(t *testing.T) {
	t.Parallel()
	s := newSite(t, openSQLite(t))
	b := s.browser()

	p := b.must(b.get("/ui/workers?status=idle"), http.StatusSeeOther)
	if p.Location() != "/ui/signin?next=%2Fui%2Fworkers%3Fstatus%3Didle" {
		t.Fatalf("unsigned page went to %q", p.Location())
	}
	if p := b.get("/"); p.Status != http.StatusFound || p.Location() != "/ui/" {
		t.Fatalf("/ → %d %q", p.Status, p.Location())
	}

	// A wrong token: the error sits beside the field, nothing is echoed, and
	// the failures are audited in aggregate: one auth.failure record for the
	// client and interval, with the count and the sign-in route, not one
	// record per attempt.
	for range 3 {
		p = b.signIn("sta_not-a-real-token", "/ui/workers")
		b.must(p, http.StatusUnauthorized)
	}
	contains(t, p, `id="token-error"`, "not a valid admin token", `aria-invalid="true"`, `value="/ui/workers"`)
	lacks(t, p, "sta_not-a-real-token")
	testutil.Eventually(t, 5*time.Second, "the 3 failures in auth.failure records", func() bool {
		recs, _ := s.st.ListAuditNewest(t.Context(), store.AuditFilter{Action: "auth.failure"})
		n := 0
		for _, rec := range recs {
			var d struct {
				Routes map[string]int `json:"routes"`
			}
			if rec.ActorIP == "127.0.0.1" && json.Unmarshal(rec.Details, &d) == nil {
				n += d.Routes["POST /ui/signin"]
			}
		}
		return n == 3
	})
	if recs, _ := s.st.ListAuditNewest(t.Context(), store.AuditFilter{Action: "dashboard.signin"}); len(recs) != 0 {
		t.Fatalf("a record per failed sign-in: %+v", recs)
	}

	// The right one: back to where we were going, with a session cookie that
	// holds a random id and not the token.
	p = b.must(b.signIn(s.admin, "/ui/workers?status=idle"), http.StatusSeeOther)
	if p.Location() != "/ui/workers?status=idle" {
		t.Fatalf("after sign-in went to %q", p.Location())
	}
	var cookie *http.Cookie
	for _, c := range (&http.Response{Header: p.Header}).Cookies() {
		if c.Name == sessionCookie {
			cookie = c
		}
	}
	if cookie == nil || !cookie.HttpOnly || cookie.SameSite != http.SameSiteStrictMode || cookie.Path != "/ui/" || cookie.Secure ||
		strings.Contains(cookie.Value, "sta_") || len(cookie.Value) != 43 {
		t.Fatalf("session cookie: %+v", cookie)
	}
	sum := sha256.Sum256([]byte(cookie.Value))
	ds, err := s.st.GetDashboardSession(t.Context(), hex.EncodeToString(sum[:]))
	if err != nil || ds.Token.Name != "test-admin" {
		t.Fatalf("stored session: %+v %v", ds, err)
	}
	p = b.must(b.get("/ui/"), 200)
	contains(t, p, "Signed in as <strong>test-admin</strong>", `data-count="workers-total"`)

	// Sign-out needs the form token; then the session is gone everywhere.
	b.must(b.post("/ui/signout", url.Values{"csrf": {"forged"}}), http.StatusForbidden)
	p = b.must(b.post("/ui/signout", nil), http.StatusSeeOther)
	if _, err := s.st.GetDashboardSession(t.Context(), ds.IDHash); err == nil {
		t.Fatal("session still stored after sign-out")
	}
	b.must(b.get("/ui/"), http.StatusSeeOther)
	// Replaying the old cookie does not work either.
	b2 := s.browser()
	b2.c.Jar.SetCookies(mustURL(s.hs.URL+"/ui/"), []*http.Cookie{{Name: sessionCookie, Value: cookie.Value, Path: "/ui/"}})
	b2.must(b2.get("/ui/"), http.StatusSeeOther)
}

func mustURL(s string) *url.URL {
	u, _ := url.Parse(s)
	return u
}

func TestSignInFailuresCountInTheLimiter(t *testing.T) {
	t.Parallel()
	s := newSite(t, openSQLite(t)) // 5 failures a minute
	b := s.browser()
	var p page
	for range 6 {
		p = b.signIn("garbage", "/ui/")
	}
	b.must(p, http.StatusTooManyRequests)
	contains(t, p, "Too many failed sign-ins")
	// The API shares the count: the same peer is limited there too.
	if st, _ := s.api("GET", "/api/queue", "Authorization", "Bearer garbage", nil); st != http.StatusTooManyRequests {
		t.Fatalf("API after dashboard failures: %d", st)
	}
	// A valid token is never locked out.
	b.mustSignIn(s.admin)
}

func TestSignInFormNeedsItsOwnPage(t *testing.T) {
	t.Parallel()
	s := newSite(t, openSQLite(t))
	b := s.browser()
	// Without the sign-in page's form token (a form on another site), nothing happens.
	p := b.post("/ui/signin", url.Values{"token": {s.admin}, "form_token": {"x"}})
	b.must(p, http.StatusForbidden)
	b.must(b.get("/ui/"), http.StatusSeeOther)
	// A cross-site Origin is refused even with the right form token.
	b.origin = "https://evil.example"
	b.must(b.signIn(s.admin, "/ui/"), http.StatusForbidden)
	// An off-site next is replaced by the overview.
	b.origin = s.hs.URL
	if p := b.signIn(s.admin, "https://evil.example/ui/"); p.Location() != "/ui/" {
		t.Fatalf("next to another site kept: %q", p.Location())
	}
}

func TestSessionIdleExpiryReturnsToThePage(t *testing.T) {
	t.Parallel()
	s := newSite(t, openSQLite(t))
	b := s.browser()
	b.mustSignIn(s.admin)
	b.must(b.get("/ui/queue?status=failed"), 200)

	// Live updates do not keep a session alive; use does.
	s.clock.Advance(DefaultIdleTimeout - time.Minute)
	b.must(b.get("/ui/live/overview", "HX-Request", "true"), 200)
	b.must(b.get("/ui/queue"), 200)
	s.clock.Advance(DefaultIdleTimeout - time.Minute)
	b.must(b.get("/ui/live/overview", "HX-Request", "true"), 200)
	s.clock.Advance(2 * time.Minute)

	// An htmx update of an expired session sends the whole page to sign in.
	p := b.get("/ui/live/queue?status=failed", "HX-Request", "true", "HX-Current-URL", s.hs.URL+"/ui/queue?status=failed")
	b.must(p, http.StatusUnauthorized)
	if got := p.Header.Get("HX-Redirect"); got != "/ui/signin?expired=1&next=%2Fui%2Fqueue%3Fstatus%3Dfailed" {
		t.Fatalf("HX-Redirect %q", got)
	}
	b.must(b.get("/ui/queue?status=failed"), http.StatusSeeOther)
	p = b.must(b.get("/ui/signin?expired=1&next=%2Fui%2Fqueue%3Fstatus%3Dfailed"), 200)
	contains(t, p, "Your session ended")
	// Signing in again goes back to that page.
	if p := b.signIn(s.admin, "/ui/queue?status=failed"); p.Location() != "/ui/queue?status=failed" {
		t.Fatalf("after re-sign-in: %d %q", p.Status, p.Location())
	}
	// An expired session's form post returns to the page the form was on.
	s.clock.Advance(DefaultIdleTimeout + time.Minute)
	req, _ := http.NewRequest("POST", s.hs.URL+"/ui/queue", strings.NewReader("csrf=x"))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Referer", s.hs.URL+"/ui/queue?page=2")
	p = b.must(b.do(req), http.StatusSeeOther)
	if p.Location() != "/ui/signin?expired=1&next=%2Fui%2Fqueue%3Fpage%3D2" {
		t.Fatalf("expired post went to %q", p.Location())
	}
}

func TestRevokedTokenEndsItsSessions(t *testing.T) {
	t.Parallel()
	s := newSite(t, openSQLite(t))
	ops := s.token("ops", auth.ScopeAll)
	b := s.browser()
	b.mustSignIn(ops)
	b.must(b.get("/ui/workers"), 200)
	var id string
	toks, _ := s.st.ListAdminTokens(t.Context())
	for _, tk := range toks {
		if tk.Name == "ops" {
			id = tk.ID
		}
	}
	if st, _ := s.adminAPI("DELETE", "/api/admin/tokens/"+id, nil); st != 200 {
		t.Fatalf("revoke: %d", st)
	}
	b.must(b.get("/ui/workers"), http.StatusSeeOther)
	b.must(b.signIn(ops, "/ui/"), http.StatusUnauthorized)
}

// A session opened with a token that expires (a person's command-line
// login pasted into the form) ends when the token does, however busy.
func TestSessionEndsWhenItsTokenExpires(t *testing.T) {
	t.Parallel()
	s := newSite(t, openSQLite(t))
	token := auth.NewAdminToken()
	expires := s.clock.Now().Add(10 * time.Minute)
	if err := s.st.CreateAdminToken(t.Context(), store.AdminToken{ID: protocol.NewTokenID(), Name: "login", Scopes: []string{auth.ScopeAll},
		Hash: auth.Hash(token), CreatedAt: time.Now(), ExpiresAt: &expires}, nil); err != nil {
		t.Fatal(err)
	}
	b := s.browser()
	b.mustSignIn(token)
	for range 2 {
		s.clock.Advance(4 * time.Minute)
		b.must(b.get("/ui/workers"), 200)
	}
	s.clock.Advance(4 * time.Minute)
	b.must(b.get("/ui/workers"), http.StatusSeeOther)
	contains(t, b.must(b.get("/ui/signin?expired=1"), 200), "Your session ended")
}

// Sessions live in the store: a restarted orchestrator, or a second replica
// on the same PostgreSQL, knows them.
func TestSessionsSurviveRestartAndAreShared(t *testing.T) {
	t.Parallel()
	url := pgURL(t)
	a := newSite(t, openPostgres(t, url))
	b := a.browser()
	b.mustSignIn(a.admin)
	replica := newSite(t, openPostgres(t, url))
	cookies := b.c.Jar.Cookies(mustURL(a.hs.URL + "/ui/"))
	b2 := replica.browser()
	b2.c.Jar.SetCookies(mustURL(replica.hs.URL+"/ui/"), cookies)
	p := b2.must(b2.get("/ui/workers"), 200)
	contains(t, p, "Signed in as <strong>test-admin</strong>")
	// The CSRF token works on the replica as well.
	b2.origin = replica.hs.URL
	b2.must(b2.post("/ui/signout", nil), http.StatusSeeOther)
	b.must(b.get("/ui/"), http.StatusSeeOther)

	// SQLite: the same file opened again after a restart.
	path := filepath.Join(t.TempDir(), "o.db")
	first := newSite(t, openSQLiteAt(t, path))
	b = first.browser()
	b.mustSignIn(first.admin)
	cookies = b.c.Jar.Cookies(mustURL(first.hs.URL + "/ui/"))
	first.hs.Close()
	first.st.Close()
	again := newSite(t, openSQLiteAt(t, path))
	b3 := again.browser()
	b3.c.Jar.SetCookies(mustURL(again.hs.URL+"/ui/"), cookies)
	b3.must(b3.get("/ui/"), 200)
}

func TestCSRFAndOriginChecks(t *testing.T) {
	t.Parallel()
	s := newSite(t, openSQLite(t))
	id, _ := s.registeredWorker("gpu-1")
	b := s.browser()
	b.mustSignIn(s.admin)
	b.must(b.get("/ui/workers"), 200)
	p := b.must(b.post("/ui/workers/"+id+"/drain", url.Values{"csrf": {""}}), http.StatusForbidden)
	contains(t, p, "security token")
	b.must(b.post("/ui/workers/"+id+"/drain", url.Values{"csrf": {b.csrf + "x"}}), http.StatusForbidden)
	b.origin = "http://evil.example"
	b.must(b.post("/ui/workers/"+id+"/drain", nil), http.StatusForbidden)
	// Registered without a stream, it shows idle or disconnected as its
	// heartbeat ages; drained it would show draining.
	if _, m := s.adminAPI("GET", "/api/admin/workers/"+id, nil); m["status"] == "draining" {
		t.Fatalf("a refused form changed the worker: %v", m["status"])
	}
	b.origin = s.hs.URL
	b.must(b.post("/ui/workers/"+id+"/drain", nil), http.StatusSeeOther)
}

// A queue.view token sees the queue but no admin pages or buttons, and the
// API refuses the actions it might still post.
func TestViewerScopes(t *testing.T) {
	t.Parallel()
	s := newSite(t, openSQLite(t))
	id, _ := s.registeredWorker("gpu-1")
	_, m := s.adminAPI("POST", "/api/queue/submit", map[string]any{"config": map[string]any{"steps": 1}, "gpu_count": 64})
	job := m["job_id"].(string)
	b := s.browser()
	b.mustSignIn(s.token("viewer", auth.ScopeQueueView))

	p := b.must(b.get("/ui/"), 200)
	contains(t, p, `href="/ui/queue"`, `data-count="jobs-queued">1<`)
	lacks(t, p, `href="/ui/workers"`, `href="/ui/audit"`)
	p = b.must(b.get("/ui/queue"), 200)
	contains(t, p, job)
	lacks(t, p, "Submit a job", `method="post" action="/ui/queue"`)
	p = b.must(b.get("/ui/jobs/"+job), 200)
	lacks(t, p, "Cancel job")

	p = b.must(b.get("/ui/workers"), http.StatusForbidden)
	contains(t, p, "may not do this", "admin.workers")
	b.must(b.get("/ui/audit"), http.StatusForbidden)
	// Posting anyway: the API refuses, nothing changes.
	b.must(b.post("/ui/workers/"+id+"/drain", nil), http.StatusForbidden)
	b.must(b.post("/ui/jobs/"+job+"/cancel", nil), http.StatusForbidden)
	b.must(b.post("/ui/queue", url.Values{"config_json": {`{"a":1}`}, "target": {"auto"}}), http.StatusForbidden)
	if _, m := s.adminAPI("GET", "/api/queue/"+job, nil); m["status"] != "queued" {
		t.Fatalf("viewer changed the job: %v", m["status"])
	}
	if _, m := s.adminAPI("GET", "/api/admin/workers/"+id, nil); m["status"] == "draining" {
		t.Fatalf("viewer changed the worker: %v", m["status"])
	}
}

var tokenValue = regexp.MustCompile(`value="(wt_[A-Za-z0-9_-]+)"`)

func TestWorkerActions(t *testing.T) {
	t.Parallel()
	s := newSite(t, openSQLite(t))
	b := s.browser()
	b.mustSignIn(s.admin)
	b.must(b.get("/ui/workers"), 200)

	// Bad input: the API's/our error beside the field, what was typed kept.
	p := b.must(b.post("/ui/workers", url.Values{"name": {"gpu-7"}, "worker_type": {"persistent"}, "labels": {"zone=eu\nnonsense"}}), http.StatusUnprocessableEntity)
	contains(t, p, `id="w-labels-error"`, "line 2", ">zone=eu\nnonsense</textarea>", `value="gpu-7"`, "<details class=\"panel\" id=\"add-worker\" open>")
	p = b.must(b.post("/ui/workers", url.Values{"name": {"gpu-7"}, "worker_type": {"spot"}}), http.StatusUnprocessableEntity)
	contains(t, p, `id="w-type-error"`, "worker_type", `value="gpu-7"`)

	// Create: the token once, with the commands that install it.
	p = b.must(b.post("/ui/workers", url.Values{"name": {"gpu-7"}, "worker_type": {"persistent"}, "labels": {"zone=eu\ngpu_type=a100"}}), 200)
	m := tokenValue.FindStringSubmatch(p.Body)
	if m == nil {
		t.Fatalf("no token on the created page:\n%s", p.Body)
	}
	token := m[1]
	contains(t, p, "shown only this once", "systemd-creds encrypt --name=worker-token", "/etc/simpletuner/worker-token",
		"read -r SIMPLETUNER_WORKER_TOKEN", "simpletuner worker --orchestrator-url "+s.hs.URL)
	// The commands to copy ask for the token: it is in none of them, so not
	// in a shell's history either; only the field with its copy button has it.
	if n := strings.Count(p.Body, token); n != 1 {
		t.Errorf("the token appears %d times on the page; want once, in its field", n)
	}
	if p.Header.Get("Cache-Control") != "no-store" {
		t.Fatalf("token page cacheable: %q", p.Header.Get("Cache-Control"))
	}
	if st, _ := s.api("GET", "/api/workers/queue", "X-Worker-Token", token, nil); st != 200 {
		t.Fatalf("the shown token does not work: %d", st)
	}
	var id string
	_, list := s.adminAPI("GET", "/api/admin/workers", nil)
	for _, w := range list["workers"].([]any) {
		if w.(map[string]any)["name"] == "gpu-7" {
			id = w.(map[string]any)["worker_id"].(string)
		}
	}
	// The list and the worker's page never show a token.
	p = b.must(b.get("/ui/workers"), 200)
	contains(t, p, "gpu-7", "zone=eu")
	lacks(t, p, token)
	p = b.must(b.get("/ui/workers/"+id), 200)
	lacks(t, p, token)

	// Labels.
	p = b.must(b.post("/ui/workers/"+id+"/labels", url.Values{"labels": {"=x"}}), http.StatusUnprocessableEntity)
	contains(t, p, `id="labels-error"`, ">=x</textarea>")
	b.must(b.post("/ui/workers/"+id+"/labels", url.Values{"labels": {"zone=us\nteam=nlp"}}), http.StatusSeeOther)
	if _, w := s.adminAPI("GET", "/api/admin/workers/"+id, nil); w["labels"].(map[string]any)["team"] != "nlp" || w["labels"].(map[string]any)["zone"] != "us" {
		t.Fatalf("labels not saved: %v", w["labels"])
	}
	p = b.must(b.get("/ui/workers/"+id+"?ok=labels"), 200)
	contains(t, p, "Labels saved.")

	// Drain and resume (from the list, which it returns to).
	p = b.must(b.post("/ui/workers/"+id+"/drain", url.Values{"back": {"/ui/workers?page=1"}}), http.StatusSeeOther)
	if p.Location() != "/ui/workers?ok=drained&page=1" {
		t.Fatalf("drain went to %q", p.Location())
	}
	p = b.must(b.get("/ui/workers"), 200)
	contains(t, p, `action="/ui/workers/`+id+`/resume"`)
	b.must(b.post("/ui/workers/"+id+"/resume", nil), http.StatusSeeOther)
	// Resuming a worker that is not draining: the API's conflict on the page.
	p = b.must(b.post("/ui/workers/"+id+"/resume", nil), http.StatusConflict)
	contains(t, p, "not draining")

	// Rotate: a new token, once; the old one is dead.
	p = b.must(b.post("/ui/workers/"+id+"/token", nil), 200)
	m = tokenValue.FindStringSubmatch(p.Body)
	if m == nil || m[1] == token {
		t.Fatalf("rotation shows no new token:\n%s", p.Body)
	}
	contains(t, p, "New token for gpu-7", "old token has stopped working")
	if st, _ := s.api("GET", "/api/workers/queue", "X-Worker-Token", token, nil); st != 401 {
		t.Fatalf("old token after rotation: %d", st)
	}
	// A registered (idle) worker: deleting asks to force, then deletes.
	if st, _ := s.api("POST", "/api/workers/register", "X-Worker-Token", m[1], map[string]any{"name": "gpu-7", "protocol": 2}); st != 200 {
		t.Fatalf("register: %d", st)
	}
	p = b.must(b.post("/ui/workers/"+id+"/delete", nil), http.StatusConflict)
	contains(t, p, "Delete gpu-7?", "only a worker with no live connection", `name="confirm" value="yes"`)
	// Ticking "force" still asks first.
	p = b.must(b.post("/ui/workers/"+id+"/delete", url.Values{"force": {"1"}}), 200)
	contains(t, p, "Force delete gpu-7")
	if st, _ := s.adminAPI("GET", "/api/admin/workers/"+id, nil); st != 200 {
		t.Fatal("worker deleted before the confirmation")
	}
	p = b.must(b.post("/ui/workers/"+id+"/delete", url.Values{"force": {"1"}, "confirm": {"yes"}}), http.StatusSeeOther)
	if st, _ := s.adminAPI("GET", "/api/admin/workers/"+id, nil); st != 404 {
		t.Fatalf("worker still there after a confirmed delete: %d", st)
	}
	contains(t, b.must(b.get(p.Location()), 200), "Worker deleted.")
	b.must(b.get("/ui/workers/"+id), http.StatusNotFound)
}

func TestWorkerTableShowsAgentGPUAndTelemetry(t *testing.T) {
	t.Parallel()
	s := newSite(t, openSQLite(t))
	id, token := s.registeredWorker("gpu-1")
	if st, _ := s.api("POST", "/api/workers/heartbeat", "X-Worker-Token", token, map[string]any{"worker_id": id, "status": "idle",
		"gpus": []map[string]any{{"uuid": "GPU-aaa", "utilization_pct": 87, "memory_used_mib": 40960, "temperature_c": 66}}}); st != 200 {
		t.Fatalf("heartbeat: %d", st)
	}
	b := s.browser()
	b.mustSignIn(s.admin)
	p := b.must(b.get("/ui/workers"), 200)
	contains(t, p, "1 × NVIDIA A100", "80 GB each", "GPU #0: 87% busy, 40.0/80.0 GiB, 66 °C", "simpletuner-workerd 1.2.3",
		"protocol 2", "pool=a", `data-worker="`+id+`"`, `hx-get="/ui/live/workers?page=1"`)
	p = b.must(b.get("/ui/live/workers?status=idle", "HX-Request", "true"), 200)
	contains(t, p, `id="workers-live"`, "gpu-1")
	lacks(t, p, "<html")
	p = b.must(b.get("/ui/live/workers?status=offline", "HX-Request", "true"), 200)
	lacks(t, p, "gpu-1")
	p = b.must(b.get("/ui/"), 200)
	contains(t, p, "<th scope=\"row\">NVIDIA A100</th>", `data-count="workers-idle">1<`, `data-count="workers-total">1<`)
}

// A worker that runs several jobs at once shows how many run and how many
// GPUs are free, and counts as partly busy on the overview.
func TestWorkerTableShowsGPUSlots(t *testing.T) {
	t.Parallel()
	s := newSite(t, openSQLite(t))
	st, m := s.adminAPI("POST", "/api/admin/workers", map[string]any{"name": "octo"})
	if st != 201 {
		t.Fatalf("create worker: %d %v", st, m)
	}
	token := m["token"].(string)
	var devices []map[string]any
	for i := range 8 {
		devices = append(devices, map[string]any{"index": i, "uuid": fmt.Sprintf("GPU-%d", i), "name": "NVIDIA H100", "memory_mib": 81559})
	}
	if st, m := s.api("POST", "/api/workers/register", "X-Worker-Token", token, map[string]any{"name": "octo", "persistent": true,
		"protocol": 2, "capabilities": map[string]any{"max_jobs": 8}, "gpu_info": map[string]any{"name": "NVIDIA H100", "count": 8, "devices": devices}}); st != 200 {
		t.Fatalf("register: %d %v", st, m)
	}
	b := s.browser()
	b.mustSignIn(s.admin)
	p := b.must(b.get("/ui/workers"), 200)
	contains(t, p, "8 × NVIDIA H100", "0 of 8 jobs, 8 GPUs free")
	p = b.must(b.get("/ui/"), 200)
	contains(t, p, `data-count="workers-partial">0<`)
	p = b.must(b.get("/ui/workers?status=partial"), 200)
	contains(t, p, "<option selected>partial</option>", "0 workers partial.")

	// Two jobs on it: the table says which job holds which GPU, and the
	// queue names the worker and shows each job's team and GPUs.
	w := connect(t, s, m["worker_id"].(string), token)
	var jobs []string
	for _, n := range []int{1, 2} {
		st, sub := s.adminAPI("POST", "/api/queue/submit", map[string]any{"config": map[string]any{"n": n}, "gpu_count": n})
		if st != 200 && st != 201 {
			t.Fatalf("submit: %d %v", st, sub)
		}
		ev := w.next(t, "job_submit")
		jobs = append(jobs, ev["job_id"].(string))
		w.runs(jobs[len(jobs)-1], ev["attempt"])
	}
	p = b.must(b.get("/ui/workers"), 200)
	contains(t, p, "2 of 8 jobs, 5 GPUs free", jobs[0]+`</a> on GPU #0</li>`, jobs[1]+`</a> on GPUs #1, #2</li>`)
	p = b.must(b.get("/ui/workers/"+m["worker_id"].(string)), 200)
	contains(t, p, jobs[0]+`</a> on GPU #0</li>`, jobs[1]+`</a> on GPUs #1, #2</li>`)
	p = b.must(b.get("/ui/queue"), 200)
	contains(t, p, `<th scope="col">Team</th>`, `<td data-label="Team">default</td>`, `<td data-label="GPUs">2 GPUs`,
		`">octo</a> <small class="mono">`+m["worker_id"].(string)+`</small>`)
	p = b.must(b.get("/ui/jobs/"+jobs[1]), 200)
	contains(t, p, `">octo</a> <small class="mono">`, "GPUs #1, #2")
}

func TestQueueSubmitJobPageAndCancel(t *testing.T) {
	t.Parallel()
	s := newSite(t, openSQLite(t))
	os.WriteFile(filepath.Join(s.cfgDir, "sdxl-lora.json"), []byte(`{"model_type": "lora", "steps": 3}`), 0o644)
	b := s.browser()
	b.mustSignIn(s.admin)
	p := b.must(b.get("/ui/queue"), 200)
	contains(t, p, "<option>sdxl-lora</option>", "Submit a job")

	// The API's errors beside their fields; what was typed stays.
	p = b.must(b.post("/ui/queue", url.Values{"config_name": {"sdxl-lora"}, "target": {"auto"}, "priority": {"99"}, "labels": {"gpu_type=a100*"}}), http.StatusUnprocessableEntity)
	contains(t, p, `id="j-priority-error"`, `field &#34;priority&#34; must be from 0 to 50`, `value="99"`, "<option selected>sdxl-lora</option>", ">gpu_type=a100*</textarea>")
	p = b.must(b.post("/ui/queue", url.Values{"config_json": {`{"a": `}, "target": {"auto"}}), http.StatusUnprocessableEntity)
	contains(t, p, `id="j-config-json-error"`, "not valid JSON", `{&#34;a&#34;: </textarea>`)
	p = b.must(b.post("/ui/queue", url.Values{"config_json": {`[1]`}, "target": {"auto"}}), http.StatusUnprocessableEntity)
	contains(t, p, `id="j-config-json-error"`, "must be a JSON object")
	p = b.must(b.post("/ui/queue", url.Values{"config_name": {"missing"}, "target": {"auto"}}), http.StatusNotFound)
	contains(t, p, `id="j-config-name-error"`, "not found", "<option selected>missing</option>")
	p = b.must(b.post("/ui/queue", url.Values{"config_json": {`{"a":1}`}, "gpu_count": {"two"}, "target": {"auto"}}), http.StatusUnprocessableEntity)
	contains(t, p, `id="j-gpus-error"`, "whole number", `value="two"`)

	// A good submission goes to the job's page.
	p = b.must(b.post("/ui/queue", url.Values{"config_name": {"sdxl-lora"}, "target": {"auto"}, "priority": {"30"}, "gpu_count": {"8"}}), http.StatusSeeOther)
	jobPath := p.Location()
	if !strings.HasPrefix(jobPath, "/ui/jobs/j_") {
		t.Fatalf("submit went to %q", jobPath)
	}
	job := strings.TrimPrefix(jobPath, "/ui/jobs/")
	p = b.must(b.get(jobPath), 200)
	contains(t, p, "queued", "Not dispatched yet", "sdxl-lora", "&#34;model_type&#34;: &#34;lora&#34;", "Cancel job", `data-log-src="/ui/jobs/`+job+`/log"`,
		"Queued, with a warning from the orchestrator:", "<li>no worker can run this job yet: it asks for 8 GPUs; the largest worker has 0</li>")
	lacks(t, b.must(b.get(jobPath), 200), "Queued, with a warning") // once
	second := b.must(b.post("/ui/queue", url.Values{"config_json": {`{"x":1}`}, "target": {"worker"}}), http.StatusSeeOther).Location()

	// Newest first, filter and pages.
	p = b.must(b.get("/ui/queue"), 200)
	if i, j := strings.Index(p.Body, strings.TrimPrefix(second, "/ui/jobs/")), strings.Index(p.Body, job); i < 0 || j < 0 || i > j {
		t.Fatalf("queue not newest first")
	}
	p = b.must(b.get("/ui/queue?status=failed"), 200)
	lacks(t, p, job)
	contains(t, p, "0 jobs failed")

	// A job running on a worker: its attempts, its live log, and cancel.
	id, token := s.registeredWorker("gpu-1")
	w := connect(t, s, id, token)
	ev := w.next(t, "job_submit")
	running := ev["job_id"].(string)
	attempt := ev["attempt"]
	w.runs(running, attempt)
	if st, _ := s.api("POST", "/api/workers/job/"+running+"/status", "X-Worker-Token", token, map[string]any{"status": "starting", "attempt": attempt}); st != 200 {
		t.Fatalf("starting report: %d", st)
	}
	req, _ := http.NewRequest("POST", s.hs.URL+"/api/workers/job/"+running+"/logs", strings.NewReader("step 1/3 loss=0.5\nstep 2/3 loss=0.4\n"))
	req.Header.Set("X-Worker-Token", token)
	req.Header.Set("X-Attempt", "1")
	req.Header.Set("X-Log-Offset", "0")
	if res, err := testutil.Client.Do(req); err != nil || res.StatusCode != 200 {
		t.Fatalf("ship log: %v %v", res, err)
	}
	p = b.must(b.get("/ui/jobs/"+running), 200)
	contains(t, p, "Attempt 1", id, "step 2/3 loss=0.4", "running")
	lacks(t, p, "Newest checkpoint")
	// Its newest kept checkpoint, where a retry resumes.
	if _, err := s.st.PutCheckpoint(t.Context(), store.Checkpoint{JobID: running, Attempt: 1, Name: "checkpoint-200", Step: 200,
		Bytes: 3 << 30, Files: []protocol.CheckpointFile{{Path: "model.safetensors", Size: 3 << 30, SHA256: strings.Repeat("a", 64)}}}, 2); err != nil {
		t.Fatal(err)
	}
	p = b.must(b.get("/ui/jobs/"+running), 200)
	contains(t, p, "Newest checkpoint", "checkpoint-200", "step 200, 3.0 GiB, 1 file)", "kept by attempt 1")
	// A small one is not shown as 0.0 GiB.
	if _, err := s.st.PutCheckpoint(t.Context(), store.Checkpoint{JobID: running, Attempt: 1, Name: "checkpoint-201", Step: 201,
		Bytes: 1126, Files: []protocol.CheckpointFile{{Path: "adapter.safetensors", Size: 1126, SHA256: strings.Repeat("b", 64)}}}, 2); err != nil {
		t.Fatal(err)
	}
	p = b.must(b.get("/ui/jobs/"+running), 200)
	contains(t, p, "step 201, 1.1 KiB, 1 file)")

	// The log stream through the dashboard (server-sent events).
	lreq, _ := http.NewRequest("GET", s.hs.URL+"/ui/jobs/"+running+"/log", nil)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	res, err := b.c.Do(lreq.WithContext(ctx))
	if err != nil || res.StatusCode != 200 || !strings.HasPrefix(res.Header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("log stream: %v %v", res, err)
	}
	rd := bufio.NewReader(res.Body)
	var lines []string
	for len(lines) < 2 {
		l, err := rd.ReadString('\n')
		if err != nil {
			t.Fatalf("reading the stream: %v (%v)", err, lines)
		}
		if strings.HasPrefix(l, "data: ") {
			lines = append(lines, strings.TrimSpace(strings.TrimPrefix(l, "data: ")))
		}
	}
	if lines[1] != "step 2/3 loss=0.4" {
		t.Fatalf("streamed lines: %v", lines)
	}

	// Cancel from the page.
	p = b.must(b.post("/ui/jobs/"+running+"/cancel", nil), http.StatusSeeOther)
	contains(t, b.must(b.get(p.Location()), 200), "Cancel requested.", "canceling")
	if st, _ := s.api("POST", "/api/workers/job/"+running+"/status", "X-Worker-Token", token, map[string]any{"status": "cancelled", "attempt": attempt}); st != 200 {
		t.Fatalf("cancelled report: %d", st)
	}
	res.Body.Close()
	// A finished job's live part tells htmx to stop polling.
	p = b.get("/ui/live/jobs/"+running, "HX-Request", "true")
	if p.Status != stopPolling {
		t.Fatalf("live part of a finished job: %d", p.Status)
	}
	contains(t, p, "cancelled", "o-cancelled")
	lacks(t, p, "hx-trigger", "Cancel job")
	p = b.must(b.post("/ui/jobs/"+running+"/cancel", nil), http.StatusConflict)
	contains(t, p, "already cancelled")
}

// sseWorker is a worker's event stream.
type sseWorker struct {
	rd      *bufio.Reader
	mu      sync.Mutex
	running []map[string]any // what its heartbeats list, as workerd's would
}

// runs makes the worker's heartbeats list the attempt: the orchestrator takes
// a running job its worker's heartbeats leave out for lost.
func (w *sseWorker) runs(jobID string, attempt any) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.running = append(w.running, map[string]any{"job_id": jobID, "attempt": attempt, "state": "running"})
}

func (w *sseWorker) heartbeat(id string) []byte {
	w.mu.Lock()
	defer w.mu.Unlock()
	body, _ := json.Marshal(map[string]any{"worker_id": id, "status": "idle", "running": w.running})
	return body
}

func connect(t *testing.T, s *site, id, token string) *sseWorker {
	t.Helper()
	req, _ := http.NewRequestWithContext(t.Context(), "GET", s.hs.URL+"/api/workers/stream?worker_id="+id, nil)
	req.Header.Set("X-Worker-Token", token)
	res, err := http.DefaultClient.Do(req)
	if err != nil || res.StatusCode != 200 {
		t.Fatalf("stream: %v %v", res, err)
	}
	t.Cleanup(func() { res.Body.Close() })
	w := &sseWorker{rd: bufio.NewReader(res.Body)}
	go func() { // keep it alive
		for {
			select {
			case <-t.Context().Done():
				return
			case <-time.After(100 * time.Millisecond):
			}
			r, _ := http.NewRequest("POST", s.hs.URL+"/api/workers/heartbeat", bytes.NewReader(w.heartbeat(id)))
			r.Header.Set("X-Worker-Token", token)
			if res, err := http.DefaultClient.Do(r); err == nil {
				res.Body.Close()
			}
		}
	}()
	return w
}

func (w *sseWorker) next(t *testing.T, typ string) map[string]any {
	t.Helper()
	event := ""
	for {
		l, err := w.rd.ReadString('\n')
		if err != nil {
			t.Fatalf("worker stream: %v", err)
		}
		l = strings.TrimSpace(l)
		if v, ok := strings.CutPrefix(l, "event: "); ok {
			event = v
		}
		if v, ok := strings.CutPrefix(l, "data: "); ok && event == typ {
			var m map[string]any
			_ = json.Unmarshal([]byte(v), &m)
			return m
		}
	}
}

func TestAuditPageFilterAndVerify(t *testing.T) {
	t.Parallel()
	st := openSQLite(t)
	s := newSite(t, st)
	a, _ := s.registeredWorker("gpu-a")
	s.registeredWorker("gpu-b")
	s.adminAPI("POST", "/api/admin/workers/"+a+"/drain", nil)
	b := s.browser()
	b.mustSignIn(s.admin)

	p := b.must(b.get("/ui/audit"), 200)
	contains(t, p, "worker.drain", "worker.register", "dashboard.signin", "Verify chain")
	if strings.Index(p.Body, "dashboard.signin") > strings.Index(p.Body, "worker.create") {
		t.Fatal("audit not newest first")
	}
	p = b.must(b.get("/ui/audit?action=worker.&target="+a), 200)
	contains(t, p, "worker.drain", "worker.create", `value="worker."`)
	lacks(t, p, "dashboard.signin")

	p = b.must(b.get("/ui/audit/verify"), 200)
	contains(t, p, `data-verify="ok"`, "Chain intact")
	db := st.(interface{ DB() *sql.DB }).DB()
	if _, err := db.Exec(`UPDATE audit SET details = '{"name":"forged"}' WHERE seq = 2`); err != nil {
		t.Fatal(err)
	}
	p = b.must(b.get("/ui/audit/verify"), 200)
	contains(t, p, `data-verify="broken"`, "Chain broken at record 2", `<tr class="broken">`, "forged")
}

func TestHeadersAssetsAndMount(t *testing.T) {
	t.Parallel()
	s := newSite(t, openSQLite(t))
	b := s.browser()
	b.mustSignIn(s.admin)
	p := b.must(b.get("/ui/"), 200)
	for k, want := range map[string]string{
		"Content-Security-Policy": contentSecurityPolicy, "Cache-Control": "no-store", "X-Content-Type-Options": "nosniff",
		"X-Frame-Options": "DENY", "Content-Type": "text/html; charset=utf-8",
	} {
		if got := p.Header.Get(k); got != want {
			t.Errorf("%s: %q, want %q", k, got, want)
		}
	}
	if !strings.Contains(contentSecurityPolicy, "script-src 'self';") || strings.Contains(contentSecurityPolicy, "unsafe") {
		t.Fatalf("CSP too loose: %s", contentSecurityPolicy)
	}
	lacks(t, p, "<script>", "style=", " onclick=")
	asset := regexp.MustCompile(`src="(/ui/static/[0-9a-f]{12}/htmx-2\.0\.11\.min\.js)"`).FindStringSubmatch(p.Body)
	if asset == nil {
		t.Fatalf("no versioned htmx on the page:\n%s", p.Body)
	}
	a := b.must(b.get(asset[1]), 200)
	if a.Header.Get("Cache-Control") != "public, max-age=31536000, immutable" || !strings.HasPrefix(a.Header.Get("Content-Type"), "text/javascript") {
		t.Fatalf("asset headers: %v", a.Header)
	}
	b.must(b.get("/ui/static/000000000000/htmx-2.0.11.min.js"), 404)
	b.must(b.get(strings.Replace(asset[1], "htmx-2.0.11.min.js", "..%2fdashboard.go", 1)), 404)
	// Static files need no session.
	s.browser().must(s.browser().get(asset[1]), 200)
	b.must(b.get("/ui/nothing-here"), 404)
	// The API is still served beside the dashboard.
	if st, _ := s.adminAPI("GET", "/api/queue/stats", nil); st != 200 {
		t.Fatalf("API through the mount: %d", st)
	}
	if st, _ := s.api("GET", "/healthz", "X", "y", nil); st != 200 {
		t.Fatalf("healthz through the mount: %d", st)
	}
}

// The vendored htmx is exactly the pinned release.
func TestVendoredHTMXIsPinned(t *testing.T) {
	b, err := files.ReadFile("static/htmx-2.0.11.min.js")
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	if got := hex.EncodeToString(sum[:]); got != "d6fdc75f204e6bdefa99b69bf1e6d4ac69b8a364f77929f45c13476b4000f717" {
		t.Fatalf("htmx-2.0.11.min.js has SHA-256 %s; see static/VENDORED.md", got)
	}
}

func TestSafeNext(t *testing.T) {
	for in, want := range map[string]string{
		"/ui/workers?status=idle": "/ui/workers?status=idle", "/ui/": "/ui/", "": "/ui/", "/api/admin/tokens": "/ui/",
		"https://evil.example/ui/": "/ui/", "//evil.example/ui/": "/ui/", "/ui/signin?next=/ui/": "/ui/", "/ui/../api": "/ui/",
		"javascript:alert(1)": "/ui/",
	} {
		if got := safeNext(in); got != want {
			t.Errorf("safeNext(%q) = %q, want %q", in, got, want)
		}
	}
}

// A long log is kept only by its end.
func TestTailBufferKeepsTheEnd(t *testing.T) {
	b := &tailBuffer{keep: 1500}
	var all strings.Builder
	for i := range 100 {
		chunk := strings.Repeat(string(rune('a'+i%26)), 999) + "\n"
		all.WriteString(chunk)
		b.Write([]byte(chunk))
	}
	got, cut := b.tail()
	if !cut || len(got) != 1500 || !strings.HasSuffix(all.String(), string(got)) {
		t.Fatalf("kept %d bytes (cut %v), not the end of the log", len(got), cut)
	}
	short := &tailBuffer{keep: 1500}
	short.Write([]byte("one line\n"))
	if got, cut := short.tail(); cut || string(got) != "one line\n" {
		t.Fatalf("a short log: %q (cut %v)", got, cut)
	}
}

// newestPointDrawn fails unless the chart draws a lone point of the series
// at height cy in its newest minute, or in the minute before when the clock
// crossed into a new minute between the sample and the page.
func newestPointDrawn(t *testing.T, p page, class, cy string) {
	t.Helper()
	m := regexp.MustCompile(`class="` + class + `" cx="([0-9.]+)" cy="` + regexp.QuoteMeta(cy) + `"`).FindStringSubmatch(p.Body)
	if m == nil {
		t.Fatalf("page draws no %s point at cy=%s:\n%s", class, cy, p.Body)
	}
	x, _ := strconv.ParseFloat(m[1], 64)
	n := int(minWindow/time.Minute) + 1 // the chart of a worker seen just now
	if lastTwo := float64(chartW) * float64(n-2) / float64(n-1); x < lastTwo-0.05 {
		t.Fatalf("the %s point is drawn at x=%s, not in the newest minute", class, m[1])
	}
}

// A worker's page shows each GPU's health and charts of its last hours; an
// unhealthy GPU says why, with a button that clears its fence; the overview
// charts the fleet's GPUs in use against those asked for.
func TestWorkerPageShowsGPUHealthAndCharts(t *testing.T) {
	t.Parallel()
	s := newSite(t, openSQLite(t))
	id, token := s.registeredWorker("gpu-1")
	fenced := []map[string]any{{"index": 0, "uuid": "GPU-aaa", "state": "unhealthy", "reason": "XID 79 (fell off the bus)", "since": "2026-01-01T00:00:00Z"}}
	beat := func(conds []map[string]any) map[string]any {
		st, m := s.api("POST", "/api/workers/heartbeat", "X-Worker-Token", token, map[string]any{"worker_id": id, "status": "idle",
			"gpus": []map[string]any{{"index": 0, "uuid": "GPU-aaa", "utilization_pct": 87, "memory_used_mib": 40960,
				"memory_total_mib": 81920, "temperature_c": 66, "power_w": 612, "health": "unhealthy: XID 79 (fell off the bus)"}},
			"gpu_conditions": conds})
		if st != 200 {
			t.Fatalf("heartbeat: %d %v", st, m)
		}
		return m
	}
	beat(fenced)
	b := s.browser()
	b.mustSignIn(s.admin)
	p := b.must(b.get("/ui/workers/"+id), 200)
	contains(t, p, `<span class="badge g-unhealthy">unhealthy</span>`, "GPU #0 is <strong>unhealthy</strong>", "XID 79 (fell off the bus)",
		"Clear the fence of GPU #0", `<svg class="chart"`, "612 W")
	newestPointDrawn(t, p, "util", "10.4") // 87 % utilisation on an 80-high chart
	p = b.must(b.post("/ui/workers/"+id+"/gpus/0/clear", nil), http.StatusSeeOther)
	p = b.must(b.get(p.Location()), 200)
	contains(t, p, "GPU cleared", "An admin cleared it")
	if m := beat(fenced); fmt.Sprint(m["clear_gpus"]) != "[0]" {
		t.Fatalf("the heartbeat reply does not pass the clear on: %v", m)
	}
	beat([]map[string]any{})
	p = b.must(b.get("/ui/workers/"+id), 200)
	lacks(t, p, "Clear the fence", "g-unhealthy")
	// A GPU that is not fenced cannot be cleared.
	p = b.must(b.post("/ui/workers/"+id+"/gpus/0/clear", nil), http.StatusConflict)
	contains(t, p, "not fenced")
	p = b.must(b.get("/ui/"), 200)
	// The fleet's chart spans what it has seen (here the shortest window),
	// with a time axis, not six hours of which the last minute has points.
	contains(t, p, "The fleet&#39;s GPUs, last 10 min", `class="online"`, `<ol class="ticks" aria-label="time axis"><li>10 min ago</li>`, "<li>now</li>")
}

// Behind a TLS proxy (server.public_url = https://…), the browser's Origin is
// the proxy's, not the plain-HTTP address the request arrives on: sign-in
// and forms work, the cookies are Secure, and a form from anywhere else,
// the plain address included, is still refused.
func TestBehindATLSProxy(t *testing.T) {
	t.Parallel()
	pub, _ := url.Parse("https://orchestrator.example.com")
	s := newSiteWith(t, openSQLite(t), func(o *Options) { o.PublicURL = pub })
	b := s.browser()
	b.origin = "https://orchestrator.example.com"
	p := b.must(b.signIn(s.admin, "/ui/"), http.StatusSeeOther)
	var secure bool
	for _, c := range (&http.Response{Header: p.Header}).Cookies() {
		if c.Name == sessionCookie {
			secure = c.Secure
		}
	}
	if !secure {
		t.Fatalf("the session cookie behind a TLS proxy is not Secure: %v", p.Header["Set-Cookie"])
	}
	for _, origin := range []string{s.hs.URL, "https://evil.example"} {
		other := s.browser()
		other.origin = origin
		if p := other.signIn(s.admin, "/ui/"); p.Status != http.StatusForbidden {
			t.Errorf("a sign-in from %s: %d", origin, p.Status)
		}
	}
}
