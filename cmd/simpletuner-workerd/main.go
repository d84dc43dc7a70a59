// Command simpletuner-workerd runs SimpleTuner training jobs on a GPU machine for
// simpletuner-orchestratord. See simpletuner-workerd(8) and workerd.toml(5).
package main

import (
	"os"

	"github.com/simpletuner/simpletuner-orchestration/internal/app/workerd"
	"github.com/simpletuner/simpletuner-orchestration/internal/isolation"
	"github.com/simpletuner/simpletuner-orchestration/internal/secretargs"
)

func main() {
	// workerd re-executes itself as a job's leader until the job's walls are
	// up where a job's thread cannot fork it inside them (see
	// isolation.LaunchGate): it only waits, then becomes the trainer. A cgo
	// build answers in C before the Go runtime starts; this is the gate of
	// the others.
	if len(os.Args) > 1 && os.Args[1] == isolation.GateArg {
		os.Exit(isolation.RunGate(os.Args[2:], os.Stderr))
	}
	workerd.LimitGoProcs(os.Getenv)
	// workerd re-executes itself as its jobs' reaper (see isolation.RunReaper).
	if len(os.Args) > 1 && os.Args[1] == isolation.ReaperArg {
		os.Exit(isolation.RunReaper(os.Stdin))
	}
	// A token given as --worker-token would be readable by every process,
	// jobs included, in /proc/<pid>/cmdline.
	args := secretargs.Hide(os.Args[1:], "worker-token")
	os.Exit(workerd.Main(args, os.Getenv, os.Stdout, os.Stderr))
}
