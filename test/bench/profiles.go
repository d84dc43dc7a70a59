package main

import (
	"log"
	"os"
	"runtime"
	"runtime/pprof"
)

// orchProcs is the orchestrator's GOMAXPROCS set by -orch-procs (0: Go's
// default), to tell the cost of more cores from the cost of more Ps.
var orchProcs int

// startProfiles turns on mutex and blocking profiles where a file is named
// and returns the function that writes them, and the allocation profile, at
// the end of the run.
func startProfiles(mutexPath, blockPath, allocsPath string) (write func()) {
	if mutexPath != "" {
		runtime.SetMutexProfileFraction(5)
	}
	if blockPath != "" {
		// One sample per 100 µs spent blocked keeps the overhead small.
		runtime.SetBlockProfileRate(100_000)
	}
	return func() {
		for _, p := range []struct{ name, path string }{{"mutex", mutexPath}, {"block", blockPath}, {"allocs", allocsPath}} {
			if p.path == "" {
				continue
			}
			f, err := os.Create(p.path)
			if err != nil {
				log.Print(err)
				continue
			}
			if err := pprof.Lookup(p.name).WriteTo(f, 0); err != nil {
				log.Print(err)
			}
			f.Close()
		}
	}
}
