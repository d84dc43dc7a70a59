package orchestratord

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/simpletuner/simpletuner-orchestration/internal/store"
	"github.com/simpletuner/simpletuner-orchestration/internal/store/sqlite"
)

// vacuum switches the embedded database to incremental auto-vacuum and keeps
// what it holds; it refuses PostgreSQL and extra arguments.
func TestVacuumCommand(t *testing.T) {
	dir := t.TempDir()
	conf := tokenConfig(t, dir, "")
	path := filepath.Join(dir, "orchestrator.db")
	st, err := sqlite.Open(context.Background(), path, nil)
	if err != nil {
		t.Fatal(err)
	}
	j, err := st.InsertJob(context.Background(), store.Job{ConfigName: "kept"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{`PRAGMA auto_vacuum = NONE`, `VACUUM`} { // as an older version made it
		if _, err := st.DB().Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	st.Close()
	code, out, errOut := runMain("--config", conf, "vacuum")
	if code != ExitOK || !strings.Contains(out, path) || !strings.Contains(out, "bytes") {
		t.Fatalf("vacuum: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	st, err = sqlite.Open(context.Background(), path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var mode int
	if err := st.DB().QueryRow(`PRAGMA auto_vacuum`).Scan(&mode); err != nil || mode != 2 {
		t.Fatalf("auto_vacuum %d after vacuum, %v", mode, err)
	}
	if got, err := st.GetJob(context.Background(), j.ID); err != nil || got.ConfigName != "kept" {
		t.Fatalf("job after vacuum: %+v %v", got, err)
	}
	if code, _, errOut := runMain("--config", conf, "vacuum", "now"); code != ExitUsage || !strings.Contains(errOut, "usage") {
		t.Errorf("vacuum with an argument: exit %d, %q", code, errOut)
	}
	pg := filepath.Join(dir, "pg.toml")
	if err := os.WriteFile(pg, []byte("[database]\nurl = \"postgres://u@localhost/db\"\n[metrics]\nlisten = \"\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, _, errOut := runMain("--config", pg, "vacuum"); code != ExitFailed || !strings.Contains(errOut, "SQLite") {
		t.Errorf("vacuum on PostgreSQL: exit %d, %q", code, errOut)
	}
}
