package orchestratord

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/simpletuner/simpletuner-orchestration/internal/config"
	"github.com/simpletuner/simpletuner-orchestration/internal/store/sqlite"
)

// VacuumCommand runs "vacuum": it rewrites the embedded database file in
// incremental auto-vacuum mode, so that the space retention frees goes back
// to the filesystem from then on. Databases made by this version are in that
// mode already, and small ones are switched at start; a large one made by an
// older version needs this once. The orchestrator must be stopped: the
// rewrite holds the database, and needs about its size in free space.
func VacuumCommand(ctx context.Context, cfg *config.Orchestrator, stdout io.Writer) error {
	kind, path := storeLocation(cfg)
	if kind != "sqlite" {
		return errors.New("vacuum is for the embedded SQLite database; PostgreSQL's autovacuum makes freed space reusable (VACUUM FULL shrinks a table's files, under an exclusive lock)")
	}
	if adminSocketClient(cfg.Server.AdminSocket) != nil {
		return fmt.Errorf("the orchestrator is running (its admin socket %s answers); stop it first", cfg.Server.AdminSocket)
	}
	lock, err := lockDatabase(path)
	if err != nil {
		return fmt.Errorf("%w; stop it first", err)
	}
	defer lock.Close()
	before, after, err := sqlite.Vacuum(ctx, path)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%s: %d → %d bytes; space freed by retention now goes back to the filesystem\n", path, before, after)
	return nil
}
