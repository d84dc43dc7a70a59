package workerd

import "runtime"

// LimitGoProcs runs workerd's Go code on one thread at a time
// (GOMAXPROCS=1) unless the environment sets GOMAXPROCS. workerd's work is
// waiting: on pipes, sockets, child processes and the orchestrator, and a
// blocking system call or cgo call (NVML) gets a thread of its own whatever
// this says. With more, the runtime sets idle threads spinning in search of
// work each time a goroutine wakes, which on a GPU machine is CPU taken from
// the jobs' data loaders; docs/performance.md has the measurement.
func LimitGoProcs(getenv func(string) string) {
	if getenv("GOMAXPROCS") == "" {
		runtime.GOMAXPROCS(1)
	}
}
