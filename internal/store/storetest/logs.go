package storetest

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/simpletuner/simpletuner-orchestration/internal/store"
)

var logTests = []test{
	{"LogAppendIdempotent", testLogAppendIdempotent},
	{"LogCap", testLogCap},
	{"LogReadCursor", testLogReadCursor},
}

// appendLog appends and checks the returned size and truncation flag.
func appendLog(t *testing.T, s store.Store, jobID string, attempt int, off int64, data string, limit, wantSize int64, wantTrunc bool) {
	t.Helper()
	size, trunc, err := s.AppendLog(t.Context(), jobID, attempt, off, []byte(data), limit)
	noErr(t, err, fmt.Sprintf("AppendLog(attempt %d, offset %d, %q)", attempt, off, data))
	if size != wantSize || trunc != wantTrunc {
		t.Fatalf("AppendLog(attempt %d, offset %d, %q) = size %d truncated %v, want %d %v",
			attempt, off, data, size, trunc, wantSize, wantTrunc)
	}
}

// readAll returns each attempt's log text.
func readAll(t *testing.T, s store.Store, jobID string) map[int]string {
	t.Helper()
	chunks, err := s.ReadLog(t.Context(), jobID, store.LogCursor{}, 0)
	noErr(t, err, "ReadLog")
	out := map[int]string{}
	for _, c := range chunks {
		if int64(len(out[c.Attempt])) != c.Offset {
			t.Fatalf("attempt %d chunk at %d follows %d bytes", c.Attempt, c.Offset, len(out[c.Attempt]))
		}
		out[c.Attempt] += string(c.Data)
	}
	return out
}

func testLogAppendIdempotent(t *testing.T, s store.Store) {
	j := newJob(t, s).ID
	appendLog(t, s, j, 1, 0, "hello ", 0, 6, false)
	appendLog(t, s, j, 1, 0, "hello ", 0, 6, false)          // resent: stored once
	appendLog(t, s, j, 1, 3, "lo world", 0, 11, false)       // overlap: only the tail
	appendLog(t, s, j, 1, 2, "llo", 0, 11, false)            // entirely old
	appendLog(t, s, j, 1, 11, "", 0, 11, false)              // empty
	appendLog(t, s, j, 2, 0, "second attempt", 0, 14, false) // attempts are separate
	size, _, err := s.AppendLog(t.Context(), j, 1, 12, []byte("gap"), 0)
	wantErr(t, err, store.ErrConflict, "chunk after a gap")
	if size != 11 {
		t.Fatalf("a gap must report the stored size 11, got %d", size)
	}
	equal(t, readAll(t, s, j), map[int]string{1: "hello world", 2: "second attempt"}, "log")
}

func testLogCap(t *testing.T, s store.Store) {
	const limit = 10
	marker := fmt.Sprintf("\n[log truncated: limit of %d bytes reached]\n", limit)
	j := newJob(t, s).ID
	appendLog(t, s, j, 1, 0, "abcd", limit, 4, false)
	appendLog(t, s, j, 1, 4, "efgh", limit, 8, false)
	appendLog(t, s, j, 1, 8, "ijklmn", limit, 14, true) // cut at 10, marker added
	appendLog(t, s, j, 1, 14, "opq", limit, 17, true)   // dropped, but accounted for
	appendLog(t, s, j, 1, 10, "klmnop", limit, 17, true)
	size, trunc, err := s.AppendLog(t.Context(), j, 1, 20, []byte("gap"), limit)
	wantErr(t, err, store.ErrConflict, "gap after truncation")
	if size != 17 || !trunc {
		t.Fatalf("gap after truncation: size %d truncated %v", size, trunc)
	}
	// The cap is per job: later attempts store nothing.
	appendLog(t, s, j, 2, 0, "again", limit, 5, true)
	equal(t, readAll(t, s, j), map[int]string{1: "abcdefghij" + marker}, "capped log")

	// The cap spans attempts; a chunk that exactly fills it is not truncated.
	k := newJob(t, s).ID
	appendLog(t, s, k, 1, 0, "12345", limit, 5, false)
	appendLog(t, s, k, 2, 0, "67890", limit, 5, false)
	appendLog(t, s, k, 2, 5, "x", limit, 6, true)
	equal(t, readAll(t, s, k), map[int]string{1: "12345", 2: "67890" + marker}, "log capped across attempts")

	// Limit 0: no cap.
	u := newJob(t, s).ID
	big := bytes.Repeat([]byte("z"), 1<<16)
	appendLog(t, s, u, 1, 0, string(big), 0, 1<<16, false)
}

func testLogReadCursor(t *testing.T, s store.Store) {
	j := newJob(t, s).ID
	// Written out of attempt order: reading is by (attempt, offset).
	appendLog(t, s, j, 2, 0, "BBBB", 0, 4, false)
	appendLog(t, s, j, 1, 0, "aaa", 0, 3, false)
	appendLog(t, s, j, 1, 3, "bb", 0, 5, false)
	appendLog(t, s, j, 2, 4, "CC", 0, 6, false)
	appendLog(t, s, j, 1, 5, "c", 0, 6, false)

	type got struct {
		A   int
		Off int64
		D   string
	}
	read := func(c store.LogCursor, max int) []got {
		t.Helper()
		chunks, err := s.ReadLog(t.Context(), j, c, max)
		noErr(t, err, "ReadLog")
		var out []got
		for _, ch := range chunks {
			out = append(out, got{ch.Attempt, ch.Offset, string(ch.Data)})
		}
		return out
	}
	all := []got{{1, 0, "aaa"}, {1, 3, "bb"}, {1, 5, "c"}, {2, 0, "BBBB"}, {2, 4, "CC"}}
	equal(t, read(store.LogCursor{}, 0), all, "whole log")
	equal(t, read(store.LogCursor{Attempt: 1, Offset: 3}, 0), all[1:], "after attempt 1 byte 3")
	equal(t, read(store.LogCursor{Attempt: 1, Offset: 4}, 0), append([]got{{1, 4, "b"}}, all[2:]...), "from inside a chunk")
	equal(t, read(store.LogCursor{Attempt: 1, Offset: 6}, 0), all[3:], "end of attempt 1")
	equal(t, read(store.LogCursor{Attempt: 2, Offset: 6}, 0), []got(nil), "end of the log")
	equal(t, read(store.LogCursor{}, 5), all[:2], "5 bytes")
	equal(t, read(store.LogCursor{}, 6), all[:3], "6 bytes")
	equal(t, read(store.LogCursor{Attempt: 1, Offset: 6}, 1), all[3:4], "at least one chunk, even past maxBytes")

	// Paging with the cursor after each chunk visits every byte once.
	var paged []got
	var c store.LogCursor
	for {
		page := read(c, 4)
		if len(page) == 0 {
			break
		}
		paged = append(paged, page...)
		last := page[len(page)-1]
		c = store.LogCursor{Attempt: last.A, Offset: last.Off + int64(len(last.D))}
	}
	equal(t, paged, all, "paged log")
}
