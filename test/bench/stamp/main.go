// Command stamp is the zero-work job of the launch benchmark: its first
// instruction reads the clock; it then sends "<job id> <unix ns>" to the
// benchmark's unix socket ($BENCH_STAMP_SOCKET) and exits 0.
package main

import (
	"fmt"
	"net"
	"os"
	"time"
)

func main() {
	at := time.Now().UnixNano()
	c, err := net.Dial("unix", os.Getenv("BENCH_STAMP_SOCKET"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "stamp:", err)
		os.Exit(1)
	}
	fmt.Fprintf(c, "%s %d\n", os.Getenv("SIMPLETUNER_JOB_ID"), at)
	c.Close()
}
