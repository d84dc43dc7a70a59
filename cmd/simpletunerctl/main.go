// Command simpletunerctl is the command-line client of
// simpletuner-orchestratord; see simpletunerctl(1).
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/simpletuner/simpletuner-orchestration/internal/ctl"
)

func main() {
	// Ctrl-C ends --watch, --follow and logs -f cleanly (status 0) instead of
	// killing the process mid-write.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() {
		<-ctx.Done()
		stop() // a second Ctrl-C kills at once, should the first not end it
	}()
	code := ctl.Main(ctx, os.Args[1:], ctl.Env{
		Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr,
		Getenv: os.Getenv, StdoutTTY: isTerminal(os.Stdout),
	})
	stop()
	os.Exit(code)
}

func isTerminal(f *os.File) bool {
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}
