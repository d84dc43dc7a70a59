package ctl

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"

	"github.com/simpletuner/simpletuner-orchestration/internal/ctl/client"
)

// listPage is one reply of a list endpoint: the items under key, the total,
// and the keyset cursor newer orchestrators add.
type listPage struct {
	items []json.RawMessage
	total int
	next  string
	raw   map[string]json.RawMessage
}

func (a *app) getPage(ctx context.Context, path string, q url.Values, key string) (listPage, error) {
	cl, err := a.client()
	if err != nil {
		return listPage{}, err
	}
	var raw map[string]json.RawMessage
	if _, err := cl.GetJSON(ctx, path, q, &raw); err != nil {
		return listPage{}, err
	}
	p := listPage{raw: raw}
	if v, ok := raw[key]; ok && string(v) != "null" {
		if err := json.Unmarshal(v, &p.items); err != nil {
			return p, fmt.Errorf("GET %s: %q is not a list", path, key)
		}
	}
	_ = json.Unmarshal(raw["total"], &p.total)
	_ = json.Unmarshal(raw["next"], &p.next)
	return p, nil
}

// eachPage walks every page of a list endpoint in the server's order and
// hands each page's items to fn until fn says stop. It follows a "next"
// cursor when the reply has one (as ?cursor=, or as the path of the next page
// when it starts with "/"), else pages by offset up to "total".
func (a *app) eachPage(ctx context.Context, path string, q url.Values, key string, pageSize int,
	fn func(items []json.RawMessage) (stop bool)) error {
	q = cloneValues(q)
	q.Set("limit", strconv.Itoa(pageSize))
	offset := 0
	seen := map[string]bool{}
	reqPath := path
	for {
		p, err := a.getPage(ctx, reqPath, q, key)
		if err != nil {
			return err
		}
		if fn(p.items) || len(p.items) == 0 {
			return nil
		}
		if p.next != "" {
			if seen[p.next] {
				return fmt.Errorf("GET %s: the orchestrator returned the cursor %q twice", path, p.next)
			}
			seen[p.next] = true
			if strings.HasPrefix(p.next, "/") {
				reqPath, q = p.next, url.Values{}
			} else {
				q.Del("offset")
				q.Set("cursor", p.next)
			}
			continue
		}
		if _, cursored := q["cursor"]; cursored || reqPath != path {
			return nil // the last keyset page has no next
		}
		offset += len(p.items)
		if offset >= p.total {
			return nil
		}
		q.Set("offset", strconv.Itoa(offset))
	}
}

func cloneValues(q url.Values) url.Values {
	out := url.Values{}
	for k, v := range q {
		out[k] = append([]string(nil), v...)
	}
	return out
}

// allWorkers lists every worker (optionally of one status), raw and decoded.
func (a *app) allWorkers(ctx context.Context, status string) ([]Worker, []json.RawMessage, error) {
	q := url.Values{}
	if status != "" {
		q.Set("status", status)
	}
	var raws []json.RawMessage
	err := a.eachPage(ctx, "/api/admin/workers", q, "workers", 1000, func(items []json.RawMessage) bool {
		raws = append(raws, items...)
		return false
	})
	if err != nil {
		return nil, nil, err
	}
	ws := make([]Worker, len(raws))
	for i, r := range raws {
		if err := json.Unmarshal(r, &ws[i]); err != nil {
			return nil, nil, fmt.Errorf("GET /api/admin/workers: entry %d is not a worker: %v", i, err)
		}
	}
	return ws, raws, nil
}

// jobScanLimit bounds how many jobs a filter or an id prefix searches.
const jobScanLimit = 5000

// newestJobs returns up to limit jobs, newest first, that match keep. This
// orchestrator lists newest first and says so ("order": "newest_first"): the
// pages are read forwards, following the "next" cursor. Older orchestrators
// (and upstream's) list oldest first: their total is read and the pages are
// read backwards from the end by offset. The first reply is returned too, for
// the queue counters.
func (a *app) newestJobs(ctx context.Context, q url.Values, limit int, keep func(Job) bool) ([]Job, []json.RawMessage, listPage, error) {
	q = cloneValues(q)
	pageSize := min(limit, 200) // the API's largest page
	if keep != nil {
		pageSize = 200
	}
	q.Set("limit", strconv.Itoa(pageSize))
	head, err := a.getPage(ctx, "/api/queue", q, "entries")
	if err != nil {
		return nil, nil, head, err
	}
	var (
		jobs    []Job
		raws    []json.RawMessage
		scanned int
	)
	// take keeps the page's items that match, in the order given.
	take := func(items []json.RawMessage, backwards bool) error {
		for k := range items {
			i := k
			if backwards {
				i = len(items) - 1 - k
			}
			if len(jobs) >= limit {
				return nil
			}
			var j Job
			if err := json.Unmarshal(items[i], &j); err != nil {
				return fmt.Errorf("GET /api/queue: an entry is not a job: %v", err)
			}
			scanned++
			if keep == nil || keep(j) {
				jobs, raws = append(jobs, j), append(raws, items[i])
			}
		}
		return nil
	}
	var order string
	_ = json.Unmarshal(head.raw["order"], &order)
	if order == "newest_first" {
		p := head
		seen := map[string]bool{}
		for {
			if err := take(p.items, false); err != nil {
				return nil, nil, head, err
			}
			if len(jobs) >= limit || p.next == "" || seen[p.next] || (keep != nil && scanned >= jobScanLimit) {
				return jobs, raws, head, nil
			}
			seen[p.next] = true
			q.Set("cursor", p.next)
			if p, err = a.getPage(ctx, "/api/queue", q, "entries"); err != nil {
				return nil, nil, head, err
			}
		}
	}
	end := head.total
	for end > 0 && len(jobs) < limit && (keep == nil || scanned < jobScanLimit) {
		start := max(0, end-pageSize)
		q.Set("offset", strconv.Itoa(start))
		q.Set("limit", strconv.Itoa(end-start))
		p, err := a.getPage(ctx, "/api/queue", q, "entries")
		if err != nil {
			return nil, nil, head, err
		}
		if len(p.items) == 0 {
			break
		}
		if err := take(p.items, true); err != nil {
			return nil, nil, head, err
		}
		end = start
	}
	return jobs, raws, head, nil
}

// resolveWorker finds a worker by id, name, or unambiguous id prefix.
func (a *app) resolveWorker(ctx context.Context, arg string) (Worker, error) {
	arg = strings.TrimSpace(arg)
	if arg == "" {
		return Worker{}, usagef("a worker id or name is required")
	}
	cl, err := a.client()
	if err != nil {
		return Worker{}, err
	}
	if looksLikeID(arg, "w_") {
		var w Worker
		_, err := cl.GetJSON(ctx, "/api/admin/workers/"+client.PathEscape(arg), nil, &w)
		if err == nil {
			return w, nil
		}
		if !client.IsStatus(err, http.StatusNotFound) {
			return Worker{}, err
		}
	}
	ws, _, err := a.allWorkers(ctx, "")
	if err != nil {
		return Worker{}, err
	}
	var byName, byPrefix []Worker
	for _, w := range ws {
		switch {
		case w.ID == arg:
			return w, nil
		case w.Name == arg:
			byName = append(byName, w)
		case strings.HasPrefix(w.ID, arg) || strings.HasPrefix(w.ID, "w_"+arg):
			byPrefix = append(byPrefix, w)
		}
	}
	for _, set := range [][]Worker{byName, byPrefix} {
		switch len(set) {
		case 0:
			continue
		case 1:
			return set[0], nil
		}
		names := make([]string, len(set))
		for i, w := range set {
			names[i] = w.ID + " (" + w.Name + ")"
		}
		sort.Strings(names)
		return Worker{}, &ambiguousError{fmt.Sprintf("%q matches %d workers: %s; give the worker id", arg, len(set), strings.Join(names, ", "))}
	}
	return Worker{}, notFoundf("no worker has the id, name or id prefix %q", arg)
}

// resolveJob turns a job id or an unambiguous prefix (with or without "j_")
// into an id; a full id is taken as it is, and the API answers for it.
func (a *app) resolveJob(ctx context.Context, arg string) (string, error) {
	arg = strings.TrimSpace(arg)
	if arg == "" {
		return "", usagef("a job id is required")
	}
	if looksLikeID(arg, "j_") {
		return arg, nil
	}
	prefix := arg
	if !strings.HasPrefix(prefix, "j_") {
		prefix = "j_" + prefix
	}
	var matches []string
	_, _, _, err := a.newestJobs(ctx, nil, 2, func(j Job) bool {
		if strings.HasPrefix(j.ID, prefix) {
			matches = append(matches, j.ID)
			return true
		}
		return false
	})
	if err != nil {
		return "", err
	}
	switch len(matches) {
	case 0:
		return "", notFoundf("no job id starts with %q (searched the newest %d jobs)", prefix, jobScanLimit)
	case 1:
		return matches[0], nil
	}
	return "", &ambiguousError{fmt.Sprintf("%q matches several jobs (%s, …); give more of the id", arg, strings.Join(matches, ", "))}
}

// looksLikeID reports whether s is a whole id: prefix and 12 base32 characters.
func looksLikeID(s, prefix string) bool {
	rest, ok := strings.CutPrefix(s, prefix)
	if !ok || len(rest) != 12 {
		return false
	}
	for _, c := range rest {
		if !('a' <= c && c <= 'z' || '2' <= c && c <= '7') {
			return false
		}
	}
	return true
}

// resolveToken finds an admin token by id, name, or unambiguous id prefix.
func (a *app) resolveToken(ctx context.Context, arg string) (Token, error) {
	cl, err := a.client()
	if err != nil {
		return Token{}, err
	}
	var reply struct {
		Tokens []Token `json:"tokens"`
	}
	if _, err := cl.GetJSON(ctx, "/api/admin/tokens", nil, &reply); err != nil {
		return Token{}, err
	}
	var byName, byPrefix []Token
	for _, t := range reply.Tokens {
		switch {
		case t.ID == arg:
			return t, nil
		case t.Name == arg:
			byName = append(byName, t)
		case strings.HasPrefix(t.ID, arg) || strings.HasPrefix(t.ID, "tok_"+arg):
			byPrefix = append(byPrefix, t)
		}
	}
	for _, set := range [][]Token{byName, byPrefix} {
		if len(set) == 1 {
			return set[0], nil
		}
		if len(set) > 1 {
			ids := make([]string, len(set))
			for i, t := range set {
				ids[i] = t.ID + " (" + t.Name + ")"
			}
			return Token{}, &ambiguousError{fmt.Sprintf("%q matches %d tokens: %s; give the token id", arg, len(set), strings.Join(ids, ", "))}
		}
	}
	return Token{}, notFoundf("no admin token has the id, name or id prefix %q", arg)
}
