// Command simpletuner-orchestratord is the central daemon of a SimpleTuner
// worker fleet: HTTP API, job queue and dispatch. See simpletuner-orchestratord(8).
package main

import (
	"os"

	"github.com/simpletuner/simpletuner-orchestration/internal/app/orchestratord"
)

func main() {
	os.Exit(orchestratord.Main(os.Args[1:], os.Getenv, os.Stdout, os.Stderr))
}
