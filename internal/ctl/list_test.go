package ctl

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
)

// listServer is a real HTTP server holding n workers and n jobs, paging its
// lists the way the orchestrator does today (limit, offset, total) or with a
// keyset cursor ("next"), as a query value or as the next page's path.
type listServer struct {
	n     int
	style string // "offset", "cursor" or "path"
	pages int
}

func (s *listServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if id, ok := strings.CutPrefix(r.URL.Path, "/api/queue/"); ok {
		fmt.Fprintf(w, `{"job_id": %q, "status": "queued", "queued_at": "2026-03-01T11:00:00Z"}`, id)
		return
	}
	s.pages++
	q := r.URL.Query()
	limit, _ := strconv.Atoi(q.Get("limit"))
	start, _ := strconv.Atoi(q.Get("offset"))
	if c := q.Get("cursor"); c != "" {
		start, _ = strconv.Atoi(strings.TrimPrefix(c, "c"))
	}
	if a := q.Get("after"); a != "" {
		start, _ = strconv.Atoi(a)
	}
	end := min(s.n, start+limit)
	var items []string
	for i := start; i < end; i++ {
		switch r.URL.Path {
		case "/api/admin/workers":
			items = append(items, fmt.Sprintf(`{"worker_id": "w_%012d", "name": "n%05d", "status": "idle", "connected": true}`, i, i))
		case "/api/queue":
			items = append(items, fmt.Sprintf(`{"job_id": "j_%012d", "status": "queued", "worker_id": "w_%012d", "queued_at": "2026-03-01T11:00:00Z"}`, i, i%3))
		}
	}
	next := ""
	if end < s.n {
		switch s.style {
		case "cursor":
			next = fmt.Sprintf(`, "next": "c%d"`, end)
		case "path":
			next = fmt.Sprintf(`, "next": "%s?limit=%d&after=%d"`, r.URL.Path, limit, end)
		}
	}
	key := "workers"
	if r.URL.Path == "/api/queue" {
		key = "entries"
	}
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprintf(w, `{"%s": [%s], "total": %d%s}`, key, strings.Join(items, ","), s.n, next)
}

func TestWorkersReadsEveryPage(t *testing.T) {
	for _, style := range []string{"offset", "cursor", "path"} {
		ls := &listServer{n: 2345, style: style}
		srv := httptest.NewServer(ls)
		r := runMain(t, map[string]string{"SIMPLETUNER_URL": srv.URL}, "", "workers", "-o", "json")
		srv.Close()
		var reply struct {
			Workers []Worker `json:"workers"`
			Total   int      `json:"total"`
		}
		if err := json.Unmarshal([]byte(r.stdout), &reply); err != nil || r.code != 0 {
			t.Fatalf("%s: exit %d %v %s", style, r.code, err, r.stderr)
		}
		if len(reply.Workers) != 2345 || reply.Total != 2345 || ls.pages != 3 {
			t.Fatalf("%s: %d workers (total %d) in %d pages", style, len(reply.Workers), reply.Total, ls.pages)
		}
		for i, w := range reply.Workers {
			if w.Name != fmt.Sprintf("n%05d", i) {
				t.Fatalf("%s: worker %d is %s", style, i, w.Name)
			}
		}
	}
}

func TestJobsNewestFirstAcrossPages(t *testing.T) {
	srv := httptest.NewServer(&listServer{n: 450, style: "offset"})
	defer srv.Close()
	env := map[string]string{"SIMPLETUNER_URL": srv.URL}
	ids := func(out string) []string {
		var reply struct {
			Entries []Job `json:"entries"`
		}
		if err := json.Unmarshal([]byte(out), &reply); err != nil {
			t.Fatal(err, out)
		}
		var s []string
		for _, j := range reply.Entries {
			s = append(s, j.ID)
		}
		return s
	}
	r := runMain(t, env, "", "jobs", "--limit", "300", "-o", "json")
	got := ids(r.stdout)
	if len(got) != 300 || got[0] != "j_000000000449" || got[299] != "j_000000000150" {
		t.Fatalf("jobs --limit 300: %d, first %v last %v", len(got), got[:1], got[len(got)-1:])
	}
	// A worker filter scans backwards across pages until it has enough.
	r = runMain(t, env, "", "jobs", "--worker", "w_000000000001", "--limit", "200", "-o", "json")
	got = ids(r.stdout)
	if len(got) != 150 || got[0] != "j_000000000448" || got[149] != "j_000000000001" {
		t.Fatalf("jobs --worker: %d, first %v last %v", len(got), got[:1], got[len(got)-1:])
	}
	// Prefix resolution finds one job among many, and refuses an ambiguous prefix.
	r = runMain(t, env, "", "job", "000000000449")
	if r.code != 0 || !strings.Contains(r.stdout, "j_000000000449") {
		t.Fatalf("job by prefix: %d %q", r.code, r.stderr)
	}
	r = runMain(t, env, "", "job", "0000000004")
	if r.code != ExitUsage || !strings.Contains(r.stderr, "matches several jobs") {
		t.Fatalf("ambiguous job prefix: %d %q", r.code, r.stderr)
	}
}

// newestServer lists jobs newest first, as this orchestrator does: it says
// so in "order", follows its own "next" cursor, and filters by worker_id.
type newestServer struct {
	n       int
	pages   int
	workers []string // worker_id of each request
	waiting []string // waiting of each request
}

func (s *newestServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/api/admin/workers" {
		fmt.Fprint(w, `{"workers": [{"worker_id": "w_000000000001", "name": "n1", "status": "idle", "connected": true}], "total": 1}`)
		return
	}
	s.pages++
	q := r.URL.Query()
	limit, _ := strconv.Atoi(q.Get("limit"))
	worker := q.Get("worker_id")
	s.workers = append(s.workers, worker)
	s.waiting = append(s.waiting, q.Get("waiting"))
	from := s.n - 1 // newest first: ids count down
	if c := q.Get("cursor"); c != "" {
		from, _ = strconv.Atoi(strings.TrimPrefix(c, "before-"))
		from--
	}
	var items []string
	last := -1
	for i := from; i >= 0 && len(items) < limit; i-- {
		if worker != "" && fmt.Sprintf("w_%012d", i%3) != worker {
			continue
		}
		items = append(items, fmt.Sprintf(`{"job_id": "j_%012d", "status": "completed", "worker_id": "w_%012d", "queued_at": "2026-03-01T11:00:00Z"}`, i, i%3))
		last = i
	}
	next := ""
	if last > 0 && len(items) == limit {
		next = fmt.Sprintf(`, "next": "before-%d"`, last)
	}
	total := ""
	if worker == "" {
		total = fmt.Sprintf(`, "total": %d`, s.n)
	}
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprintf(w, `{"entries": [%s], "order": "newest_first", "total_pending": 0%s%s}`, strings.Join(items, ","), total, next)
}

func TestJobsFollowNewestFirstCursor(t *testing.T) {
	ns := &newestServer{n: 450}
	srv := httptest.NewServer(ns)
	defer srv.Close()
	env := map[string]string{"SIMPLETUNER_URL": srv.URL}
	var reply struct {
		Entries []Job `json:"entries"`
		Total   *int  `json:"total"`
	}
	r := runMain(t, env, "", "jobs", "--limit", "300", "-o", "json")
	if err := json.Unmarshal([]byte(r.stdout), &reply); err != nil || r.code != 0 {
		t.Fatalf("exit %d %v %s", r.code, err, r.stderr)
	}
	if len(reply.Entries) != 300 || reply.Entries[0].ID != "j_000000000449" || reply.Entries[299].ID != "j_000000000150" ||
		reply.Total == nil || *reply.Total != 450 {
		t.Fatalf("jobs --limit 300: %d entries, first %s, last %s, total %v", len(reply.Entries), reply.Entries[0].ID, reply.Entries[len(reply.Entries)-1].ID, reply.Total)
	}
	if ns.pages != 2 {
		t.Fatalf("read %d pages for 300 jobs in pages of 200, want 2", ns.pages)
	}
	// The worker filter goes to the orchestrator; the reply then has no total.
	ns.pages, ns.workers = 0, nil
	reply.Total = nil
	r = runMain(t, env, "", "jobs", "--worker", "w_000000000001", "--limit", "20", "-o", "json")
	if err := json.Unmarshal([]byte(r.stdout), &reply); err != nil || r.code != 0 {
		t.Fatalf("exit %d %v %s", r.code, err, r.stderr)
	}
	if len(reply.Entries) != 20 || reply.Entries[0].ID != "j_000000000448" || reply.Total != nil {
		t.Fatalf("jobs --worker: %d entries, first %s, total %v", len(reply.Entries), reply.Entries[0].ID, reply.Total)
	}
	if len(ns.workers) != 1 || ns.workers[0] != "w_000000000001" {
		t.Fatalf("worker_id sent: %q", ns.workers)
	}
	// Why queued jobs wait is asked for where it is shown: -o wide and json.
	for format, want := range map[string]string{"table": "", "wide": "1", "json": "1"} {
		ns.waiting = nil
		if r := runMain(t, env, "", "jobs", "--limit", "5", "-o", format); r.code != 0 || len(ns.waiting) != 1 || ns.waiting[0] != want {
			t.Errorf("-o %s: exit %d, waiting sent %q, want %q", format, r.code, ns.waiting, want)
		}
	}
}
