// Command stamp is the job of the worker-side benchmarks. Its first
// instruction reads the clock; with $BENCH_STAMP_SOCKET set it sends
// "<job id> <unix ns>" there (the launch benchmark's zero-work job). A job
// config with "bench_seconds" then keeps it running that long, holding its
// GPUs, and sends "<job id>:end <unix ns>" last (the GPU packing
// benchmark's job); stopped with SIGTERM (cancelled or preempted) it sends
// "<job id>:stop <unix ns>" and exits. With "bench_checkpoint_seconds" as
// well (the two-team trace), it reads back from the socket how many of its
// seconds earlier attempts kept in checkpoints and runs only the rest, as a
// trainer resuming from its last checkpoint would.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"
)

type config struct {
	Seconds    float64 `json:"bench_seconds"`
	Checkpoint float64 `json:"bench_checkpoint_seconds"`
}

func main() {
	at := time.Now().UnixNano()
	path := os.Getenv("CONFIG_PATH")
	if path == "" {
		stamp("%s %d\n", at)
		return
	}
	data, err := os.ReadFile(path)
	if err != nil {
		fail(err)
	}
	var cfg config
	if err := json.Unmarshal(data, &cfg); err != nil {
		fail(fmt.Errorf("%s: %w", path, err))
	}
	if cfg.Seconds <= 0 {
		stamp("%s %d\n", at)
		return
	}
	// Before the start is stamped, so that a stop never goes unreported.
	stopped := make(chan os.Signal, 1)
	signal.Notify(stopped, syscall.SIGTERM)
	done := 0.0
	if cfg.Checkpoint > 0 {
		done = stampAsk("%s %d\n", at)
	} else {
		stamp("%s %d\n", at)
	}
	select {
	case <-time.After(time.Duration((cfg.Seconds - done) * float64(time.Second))):
		stamp("%s:end %d\n", time.Now().UnixNano())
	case <-stopped:
		stamp("%s:stop %d\n", time.Now().UnixNano())
		os.Exit(143) // as SIGTERM's default action would report it
	}
}

// stamp sends a line to the benchmark's socket, if it listens.
func stamp(format string, at int64) {
	if c := dial(); c != nil {
		fmt.Fprintf(c, format, os.Getenv("SIMPLETUNER_JOB_ID"), at)
		c.Close()
	}
}

// stampAsk sends a line like stamp and reads back the seconds of the job
// that earlier attempts kept.
func stampAsk(format string, at int64) float64 {
	c := dial()
	if c == nil {
		return 0
	}
	defer c.Close()
	fmt.Fprintf(c, format, os.Getenv("SIMPLETUNER_JOB_ID"), at)
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		fail(fmt.Errorf("reading the kept seconds: %w", err))
	}
	done, err := strconv.ParseFloat(strings.TrimSpace(line), 64)
	if err != nil {
		fail(fmt.Errorf("kept seconds %q: %w", line, err))
	}
	return done
}

func dial() net.Conn {
	sock := os.Getenv("BENCH_STAMP_SOCKET")
	if sock == "" {
		return nil
	}
	c, err := net.Dial("unix", sock)
	if err != nil {
		fail(err)
	}
	return c
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "stamp:", err)
	os.Exit(1)
}
