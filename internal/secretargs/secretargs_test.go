package secretargs

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// The test binary re-runs itself with a secret on its command line, hides it
// and prints its own /proc/self/cmdline, as another process would read it.
func TestMain(m *testing.M) {
	if os.Getenv("SECRETARGS_CHILD") == "1" {
		parsed := Hide(os.Args[1:], "worker-token")
		cmdline, err := os.ReadFile("/proc/self/cmdline")
		if err != nil {
			os.Exit(2)
		}
		os.Stdout.WriteString(strings.Join(parsed, " ") + "\n" + strings.ReplaceAll(string(cmdline), "\x00", " ") + "\n")
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func TestHideKeepsSecretsOutOfCmdline(t *testing.T) {
	for _, args := range [][]string{
		{"--worker-token", "wt_secret1", "--name", "a"},
		{"--worker-token=wt_secret1", "--name", "a"},
		{"-worker-token", "wt_secret1", "--name", "a"},
		{"-worker-token=wt_secret1", "--name", "a"},
	} {
		cmd := exec.Command(os.Args[0], args...)
		cmd.Env = append(os.Environ(), "SECRETARGS_CHILD=1")
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		parsed, cmdline, _ := strings.Cut(string(out), "\n")
		if parsed != strings.Join(args, " ") {
			t.Errorf("%v: the copy to parse was changed: %q", args, parsed)
		}
		if strings.Contains(cmdline, "wt_secret1") {
			t.Errorf("%v: the secret is still in /proc/self/cmdline: %q", args, cmdline)
		}
		if !strings.Contains(cmdline, "**********") || !strings.Contains(cmdline, "--name a") {
			t.Errorf("%v: cmdline %q", args, cmdline)
		}
	}
}

// Other flags, and anything after "--", are left alone.
func TestHideLeavesTheRest(t *testing.T) {
	args := []string{"--name", "worker-token", "--", "--worker-token", "x"}
	mem := make([]string, len(args))
	for i, a := range args {
		mem[i] = string([]byte(a)) // writable copies standing in for argv
	}
	Hide(mem, "worker-token")
	if strings.Join(mem, " ") != strings.Join(args, " ") {
		t.Fatalf("changed: %v", mem)
	}
}
