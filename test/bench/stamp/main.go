// Command stamp is the job of the worker-side benchmarks. Its first
// instruction reads the clock; with $BENCH_STAMP_SOCKET set it sends
// "<job id> <unix ns>" there (the launch benchmark's zero-work job). A job
// config with "bench_seconds" then keeps it running that long, holding its
// GPUs, and sends "<job id>:end <unix ns>" last (the GPU packing
// benchmark's job).
package main

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"time"
)

func main() {
	at := time.Now().UnixNano()
	stamp("%s %d\n", at)
	if path := os.Getenv("CONFIG_PATH"); path != "" {
		data, err := os.ReadFile(path)
		if err != nil {
			fail(err)
		}
		var cfg struct {
			Seconds float64 `json:"bench_seconds"`
		}
		if err := json.Unmarshal(data, &cfg); err != nil {
			fail(fmt.Errorf("%s: %w", path, err))
		}
		if cfg.Seconds > 0 {
			time.Sleep(time.Duration(cfg.Seconds * float64(time.Second)))
			stamp("%s:end %d\n", time.Now().UnixNano())
		}
	}
}

// stamp sends a line to the benchmark's socket, if it listens.
func stamp(format string, at int64) {
	sock := os.Getenv("BENCH_STAMP_SOCKET")
	if sock == "" {
		return
	}
	c, err := net.Dial("unix", sock)
	if err != nil {
		fail(err)
	}
	fmt.Fprintf(c, format, os.Getenv("SIMPLETUNER_JOB_ID"), at)
	c.Close()
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "stamp:", err)
	os.Exit(1)
}
