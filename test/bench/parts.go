package main

import (
	"bytes"
	"fmt"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
)

// The programs the benchmark runs besides itself: the daemons, the
// zero-work job and the stamp program. Built from this tree into the run's
// temporary directory, or, with -bundle, taken prebuilt from a folder that
// `make bench-bundle` fills, so the benchmark runs on a machine with neither
// Go nor a C compiler.

// bundleDir is -bundle: "" builds every part.
var bundleDir string

var (
	partsMu sync.Mutex
	built   = map[string]string{}
)

// part returns the path of a program named name: the bundle's, or one built
// into tmp once.
func part(name, tmp string, build func(out string) error) (string, error) {
	if bundleDir != "" {
		p := filepath.Join(bundleDir, name)
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("the bundle %s lacks %s (make bench-bundle makes a complete one): %w", bundleDir, name, err)
		}
		return filepath.Abs(p)
	}
	partsMu.Lock()
	defer partsMu.Unlock()
	if p, ok := built[name]; ok {
		return p, nil
	}
	out := filepath.Join(tmp, name)
	log.Printf("building %s", name)
	if err := build(out); err != nil {
		return "", err
	}
	built[name] = out
	return out, nil
}

func orchestratordPart(tmp string) (string, error) {
	return part("simpletuner-orchestratord", tmp, func(out string) error {
		return goBuild(out, "./cmd/simpletuner-orchestratord", "0")
	})
}

func workerdPart(tmp string) (string, error) {
	return part("simpletuner-workerd", tmp, func(out string) error {
		return goBuild(out, "./cmd/simpletuner-workerd", "1")
	})
}

func stampPart(tmp string) (string, error) {
	return part("stamp", tmp, func(out string) error { return goBuild(out, "./test/bench/stamp", "0") })
}

func zeroJobPart(tmp string) (string, error) { return part("zerojob", tmp, buildZeroJob) }

func goBuild(out, pkg, cgo string) error {
	cmd := exec.Command("go", "build", "-trimpath", "-o", out, pkg)
	cmd.Env = append(os.Environ(), "CGO_ENABLED="+cgo)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go build %s: %v\n%s", pkg, err, stderr.String())
	}
	return nil
}

// buildZeroJob compiles the zero-work job, static and without a C library
// (see zerojob.c): neither a loader nor libc's start-up runs before its
// first instruction. -fno-builtin and -fno-tree-loop-distribute-patterns keep
// the compiler from turning its loops into calls to memcpy or memset, which
// it would then lack.
func buildZeroJob(out string) error {
	const src = "test/bench/zerojob/zerojob.c"
	cmd := exec.Command("cc", "-O2", "-static", "-nostdlib", "-ffreestanding", "-fno-stack-protector",
		"-fno-builtin", "-fno-tree-loop-distribute-patterns", "-o", out, src)
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("cc %s: %v\n%s", src, err, b)
	}
	return nil
}
