package pgtest

import (
	"database/sql"
	"testing"
)

func TestMain(m *testing.M) { Main(m) }

// Each call gets its own empty database on the same server.
func TestStartIsolated(t *testing.T) {
	t.Parallel()
	a, b := Start(t), Start(t)
	if a == b {
		t.Fatalf("two tests share database %s", a)
	}
	db, err := sql.Open("postgres", a)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec("CREATE TABLE x (id int)"); err != nil {
		t.Fatal(err)
	}
	db2, err := sql.Open("postgres", b)
	if err != nil {
		t.Fatal(err)
	}
	defer db2.Close()
	var n int
	if err := db2.QueryRow("SELECT count(*) FROM pg_tables WHERE tablename = 'x'").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatal("table from one database visible in another")
	}
}
