package workerd

import (
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"
)

// The limit is process-wide, so each case runs in a child test process.
func TestLimitGoProcs(t *testing.T) {
	if os.Getenv("WORKERD_PROCS_CHILD") != "" {
		LimitGoProcs(os.Getenv)
		os.Stdout.WriteString("procs=" + strconv.Itoa(runtime.GOMAXPROCS(0)) + "\n")
		os.Exit(0)
	}
	for _, tc := range []struct {
		env  string // GOMAXPROCS in the child's environment; "" unset
		want string
	}{{"", "procs=1"}, {"3", "procs=3"}} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestLimitGoProcs$")
		cmd.Env = []string{"WORKERD_PROCS_CHILD=1"}
		if tc.env != "" {
			cmd.Env = append(cmd.Env, "GOMAXPROCS="+tc.env)
		}
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("child with GOMAXPROCS=%q: %v\n%s", tc.env, err, out)
		}
		if !strings.Contains(string(out), tc.want) {
			t.Errorf("child with GOMAXPROCS=%q printed %q, want %s", tc.env, out, tc.want)
		}
	}
}
