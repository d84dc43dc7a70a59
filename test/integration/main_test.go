// Package integration runs the orchestrator's core (orchestrator.Server over a
// real SQLite or PostgreSQL store, served on loopback HTTP) with workerd's
// engine (worker.Worker running the demo trainer as real processes) in one
// test process. It is where orderings between the two sides are forced
// deterministically: a proxy between them holds or fails chosen requests.
package integration

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/simpletuner/simpletuner-orchestration/internal/pgtest"
)

// demoTrainer is test/demo-trainer, built once.
var demoTrainer string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "integration-")
	if err != nil {
		panic(err)
	}
	demoTrainer = filepath.Join(dir, "demo-trainer")
	build := exec.Command("go", "build", "-o", demoTrainer, "../demo-trainer")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building the demo trainer:", err)
		os.Exit(2)
	}
	code := m.Run()
	pgtest.Stop()
	os.RemoveAll(dir)
	os.Exit(code)
}
