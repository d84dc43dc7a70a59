// Package secretargs keeps secrets given as command-line flags out of
// /proc/<pid>/cmdline, which every process on the machine may read (jobs
// included, where /proc is not mounted with hidepid).
//
// The kernel serves /proc/<pid>/cmdline from the process's own argument
// memory, and on Linux Go's os.Args strings point into that memory. Hide
// copies the arguments for parsing and then overwrites each secret value in
// place, so that ps and /proc show "--worker-token=********".
package secretargs

import (
	"strings"
	"unsafe"
)

// Hide returns a copy of args (elements of os.Args) to parse, and blanks in
// place the values of the named flags, in every spelling the flag package
// accepts: -name v, --name v, -name=v, --name=v. Parsing stops at "--".
func Hide(args []string, names ...string) []string {
	parsed := make([]string, len(args))
	for i, a := range args {
		parsed[i] = strings.Clone(a)
	}
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			break
		}
		name, value, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !strings.HasPrefix(a, "-") || !isOneOf(name, names) {
			continue
		}
		if hasValue {
			blank(a[len(a)-len(value):])
		} else if i+1 < len(args) {
			i++
			blank(args[i])
		}
	}
	return parsed
}

func isOneOf(s string, list []string) bool {
	for _, x := range list {
		if s == x {
			return true
		}
	}
	return false
}

// blank overwrites the bytes of s with '*'. s must live in writable memory
// that nothing reads as a string again: here, the process's argument area,
// whose strings Hide has copied before.
func blank(s string) {
	if len(s) == 0 {
		return
	}
	b := unsafe.Slice(unsafe.StringData(s), len(s))
	for i := range b {
		b[i] = '*'
	}
}
