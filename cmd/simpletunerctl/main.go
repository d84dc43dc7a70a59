// Command simpletunerctl is the command-line client of
// simpletuner-orchestratord; see simpletunerctl(1).
package main

import (
	"context"
	"os"
	"os/signal"
	"strings"
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
		StdinTTY: isTerminal(os.Stdin), ReadPassword: func() (string, error) { return readPassword(os.Stdin) },
	})
	stop()
	os.Exit(code)
}

func isTerminal(f *os.File) bool {
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// readPassword reads a line from the terminal f with echo turned off.
func readPassword(f *os.File) (string, error) {
	fd := int(f.Fd())
	old, err := unix.IoctlGetTermios(fd, unix.TCGETS)
	if err != nil {
		return "", err
	}
	quiet := *old
	quiet.Lflag &^= unix.ECHO
	quiet.Lflag |= unix.ICANON | unix.ISIG
	if err := unix.IoctlSetTermios(fd, unix.TCSETS, &quiet); err != nil {
		return "", err
	}
	defer func() { _ = unix.IoctlSetTermios(fd, unix.TCSETS, old) }()
	var line []byte
	b := make([]byte, 1)
	for {
		n, err := f.Read(b)
		if n == 0 || err != nil || b[0] == '\n' {
			return strings.TrimSuffix(string(line), "\r"), nil
		}
		line = append(line, b[0])
	}
}
