package main

import (
	"context"
	"database/sql"
	"fmt"
	"sort"
	"strings"
	"time"
)

// pgWaits samples what PostgreSQL's active backends wait on every 5 ms until
// ctx ends and returns the counts, most frequent first: evidence of where a
// throughput limit that is not CPU comes from.
func pgWaits(ctx context.Context, url string) <-chan string {
	out := make(chan string, 1)
	go func() {
		db, err := sql.Open("postgres", url)
		if err != nil {
			out <- err.Error()
			return
		}
		defer db.Close()
		db.SetMaxOpenConns(1)
		counts, samples := map[string]int{}, 0
		for ctx.Err() == nil {
			// A row-lock wait is named with the table it waits on.
			rows, err := db.QueryContext(ctx, `SELECT COALESCE(a.wait_event_type, 'CPU') || ':' || COALESCE(a.wait_event, '-') ||
				COALESCE(' on ' || (SELECT c.relname FROM pg_locks l JOIN pg_class c ON c.oid = l.relation
					WHERE l.pid = a.pid AND NOT l.granted LIMIT 1), '')
				FROM pg_stat_activity a WHERE a.state = 'active' AND a.pid <> pg_backend_pid() AND a.backend_type = 'client backend'`)
			if err == nil {
				for rows.Next() {
					var w string
					if rows.Scan(&w) == nil {
						counts[w]++
					}
				}
				rows.Close()
				samples++
			}
			time.Sleep(20 * time.Millisecond)
		}
		type kv struct {
			k string
			n int
		}
		var list []kv
		for k, n := range counts {
			list = append(list, kv{k, n})
		}
		sort.Slice(list, func(a, b int) bool { return list[a].n > list[b].n })
		var parts []string
		for i, e := range list {
			if i == 6 {
				break
			}
			parts = append(parts, fmt.Sprintf("%s %.2f", e.k, float64(e.n)/float64(max(samples, 1))))
		}
		out <- fmt.Sprintf("mean active backends by wait over %d samples: %s", samples, strings.Join(parts, ", "))
	}()
	return out
}
