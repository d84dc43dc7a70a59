package dashboard

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator/orchtest"
	"github.com/simpletuner/simpletuner-orchestration/internal/pgtest"
	"github.com/simpletuner/simpletuner-orchestration/internal/slapdtest"
	"github.com/simpletuner/simpletuner-orchestration/internal/store"
	"github.com/simpletuner/simpletuner-orchestration/internal/store/postgres"
	"github.com/simpletuner/simpletuner-orchestration/internal/store/sqlite"
	"github.com/simpletuner/simpletuner-orchestration/internal/testutil"
)

func TestMain(m *testing.M) {
	code := m.Run()
	pgtest.Stop()
	slapdtest.Stop()
	os.Exit(code)
}

// clock is a settable time source shared by a dashboard and its test.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// site is a real orchestrator (real store, its API and loops) with the
// dashboard mounted the way orchestratord mounts it, on a loopback server.
type site struct {
	t      testing.TB
	st     store.Store
	srv    *orchestrator.Server
	orch   *orchtest.Orch
	hs     *httptest.Server
	clock  *clock
	admin  string // sta_ token with every scope
	cfgDir string
}

func openSQLite(t testing.TB) store.Store {
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "o.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

func openPostgres(t testing.TB, url string) store.Store {
	st, err := postgres.Open(context.Background(), url, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

func newSite(t testing.TB, st store.Store, mods ...func(*orchestrator.Options)) *site {
	t.Helper()
	return newSiteWith(t, st, nil, mods...)
}

// newSiteWith is newSite with the dashboard's options adjusted by tweak.
func newSiteWith(t testing.TB, st store.Store, tweak func(*Options), mods ...func(*orchestrator.Options)) *site {
	t.Helper()
	tm := orchtest.Timers
	// Its workers answer dispatches and cancels by hand as the page checks go
	// along: no deadline may end while a test looks at the job, however slow.
	tm.AckTimeout, tm.CancelGrace, tm.CancelReportTimeout = time.Minute, time.Minute, time.Minute
	opt := orchestrator.OptionsFrom(tm.Config(t))
	opt.AuthFailuresPerMinute = 5
	for _, m := range mods {
		m(&opt)
	}
	log := slog.New(slog.DiscardHandler)
	srv := orchestrator.New(st, opt, log)
	c := &clock{t: time.Now()}
	api := srv.Handler()
	dopt := Options{API: srv.API(), HTTP: api, Sessions: st, Version: "test", Log: log, Now: c.Now}
	if tweak != nil {
		tweak(&dopt)
	}
	d, err := New(dopt)
	if err != nil {
		t.Fatal(err)
	}
	o := orchtest.Serve(t, st, srv, d.Mount(api), "")
	return &site{t: t, st: st, srv: srv, orch: o, hs: o.HTTP, clock: c, admin: o.Admin, cfgDir: opt.ConfigsDir}
}

// token creates an admin token with scopes and returns it.
func (s *site) token(name string, scopes ...string) string {
	s.t.Helper()
	return orchtest.AdminToken(s.t, s.st, name, scopes...)
}

// browser is an HTTP client with cookies that does not follow redirects, so
// tests see them; it sends the Origin header a browser sends with a form.
type browser struct {
	t      testing.TB
	s      *site
	c      *http.Client
	origin string
	// csrf is the form token of the last page read.
	csrf string
}

type page struct {
	Status int
	Header http.Header
	Body   string
}

func (p page) Location() string { return p.Header.Get("Location") }

func (s *site) browser() *browser {
	jar, _ := cookiejar.New(nil)
	return &browser{t: s.t, s: s, origin: s.hs.URL, c: &http.Client{Jar: jar, Timeout: 20 * time.Second, Transport: testutil.Client.Transport,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

var csrfField = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

func (b *browser) do(req *http.Request) page {
	b.t.Helper()
	res, err := b.c.Do(req)
	if err != nil {
		b.t.Fatalf("%s %s: %v", req.Method, req.URL, err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	p := page{Status: res.StatusCode, Header: res.Header, Body: string(body)}
	if m := csrfField.FindStringSubmatch(p.Body); m != nil {
		b.csrf = m[1]
	}
	return p
}

func (b *browser) get(path string, hdr ...string) page {
	b.t.Helper()
	req, _ := http.NewRequest("GET", b.s.hs.URL+path, nil)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	return b.do(req)
}

// post sends a form with the page's CSRF token (unless the form sets one).
func (b *browser) post(path string, form url.Values) page {
	b.t.Helper()
	if form == nil {
		form = url.Values{}
	}
	if _, ok := form["csrf"]; !ok {
		form.Set("csrf", b.csrf)
	}
	req, _ := http.NewRequest("POST", b.s.hs.URL+path, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if b.origin != "" {
		req.Header.Set("Origin", b.origin)
	}
	return b.do(req)
}

var formTokenField = regexp.MustCompile(`name="form_token" value="([^"]+)"`)

// signIn signs in with token through the form and returns the reply to the post.
func (b *browser) signIn(token, next string) page {
	b.t.Helper()
	p := b.get("/ui/signin?next=" + url.QueryEscape(next))
	m := formTokenField.FindStringSubmatch(p.Body)
	if p.Status != 200 || m == nil {
		b.t.Fatalf("sign-in form: %d %s", p.Status, p.Body)
	}
	return b.post("/ui/signin", url.Values{"form_token": {m[1]}, "token": {token}, "next": {next}})
}

// mustSignIn signs in and fails the test unless it worked.
func (b *browser) mustSignIn(token string) {
	b.t.Helper()
	if p := b.signIn(token, "/ui/"); p.Status != http.StatusSeeOther || p.Location() != "/ui/" {
		b.t.Fatalf("sign in: %d %q %s", p.Status, p.Location(), p.Body)
	}
}

func (b *browser) must(p page, status int) page {
	b.t.Helper()
	if p.Status != status {
		b.t.Fatalf("got HTTP %d, want %d:\n%s", p.Status, status, p.Body)
	}
	return p
}

func contains(t testing.TB, p page, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(p.Body, w) {
			t.Fatalf("page lacks %q:\n%s", w, p.Body)
		}
	}
}

func lacks(t testing.TB, p page, unwanted ...string) {
	t.Helper()
	for _, w := range unwanted {
		if strings.Contains(p.Body, w) {
			t.Fatalf("page has %q but must not:\n%s", w, p.Body)
		}
	}
}

// pgURL starts (or reuses) the test PostgreSQL and returns a fresh database.
func pgURL(t testing.TB) string { return pgtest.Start(t) }

func openSQLiteAt(t testing.TB, path string) store.Store {
	st, err := sqlite.Open(context.Background(), path, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}
