package sqlstore

import (
	"context"
	"database/sql"
	"sync"
)

// maxCachedStmts bounds the cache; the store's statements are a few dozen
// texts, so the bound only guards against a caller building unbounded ones.
const maxCachedStmts = 512

// stmtCache keeps one prepared statement per query text and pool, so the
// engine parses each statement once per connection instead of on every call
// (parsing was a third of the orchestrator's CPU on SQLite).
type stmtCache struct {
	mu sync.Mutex
	m  map[stmtKey]*sql.Stmt
}

type stmtKey struct {
	db    *sql.DB
	query string
}

func newStmtCache() *stmtCache { return &stmtCache{m: map[stmtKey]*sql.Stmt{}} }

func (c *stmtCache) get(db *sql.DB, query string) *sql.Stmt {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.m[stmtKey{db, query}]
}

// prepare returns the cached statement for query on db, preparing it first if
// needed. Never call it while holding a transaction of db: preparing takes a
// connection, and a one-connection pool would wait forever. On failure, or
// with the cache full, it returns nil and the caller runs the query unprepared.
func (c *stmtCache) prepare(ctx context.Context, db *sql.DB, query string) *sql.Stmt {
	if st := c.get(db, query); st != nil {
		return st
	}
	st, err := db.PrepareContext(ctx, query)
	if err != nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if old := c.m[stmtKey{db, query}]; old != nil { // prepared meanwhile by another caller
		_ = st.Close()
		return old
	}
	if len(c.m) >= maxCachedStmts {
		_ = st.Close()
		return nil
	}
	c.m[stmtKey{db, query}] = st
	return st
}

// close closes every cached statement.
func (c *stmtCache) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, st := range c.m {
		_ = st.Close()
		delete(c.m, k)
	}
}

// stmt returns a prepared statement for query on c, or nil to run it
// unprepared. In a transaction, a statement not yet cached is noted in
// c.missed and prepared by write after the transaction ends.
func (c conn) stmt(ctx context.Context, query string) *sql.Stmt {
	switch {
	case c.cache == nil:
		return nil
	case c.tx == nil:
		return c.cache.prepare(ctx, c.pool, query)
	}
	parent := c.cache.get(c.pool, query)
	if parent == nil {
		*c.missed = append(*c.missed, query)
		return nil
	}
	return c.tx.StmtContext(ctx, parent)
}
