// Command simpletuner-workerd runs SimpleTuner training jobs on a GPU machine for
// simpletuner-orchestratord. See simpletuner-workerd(8) and workerd.toml(5).
package main

import (
	"os"

	"github.com/simpletuner/simpletuner-orchestration/internal/app/workerd"
	"github.com/simpletuner/simpletuner-orchestration/internal/worker"
)

func main() {
	// workerd re-executes itself as each job's supervisor (see worker.Supervise).
	if len(os.Args) > 1 && os.Args[1] == worker.SuperviseArg {
		os.Exit(worker.Supervise(os.Args[2:]))
	}
	os.Exit(workerd.Main(os.Args[1:], os.Getenv, os.Stdout, os.Stderr))
}
