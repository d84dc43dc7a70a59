package e2e

import (
	"bytes"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	. "github.com/simpletuner/simpletuner-orchestration/test/e2e/e2etest"
)

// A bad command line exits 2 in all three programs, with a message on
// standard error that names what was wrong, and nothing on standard output.
func TestUsageErrorsExit2(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		prog string
		args []string
		want string
	}{
		{"simpletuner-orchestratord", []string{"--no-such-flag"}, "no-such-flag"},
		{"simpletuner-orchestratord", []string{"--config"}, "flag needs an argument"},
		{"simpletuner-workerd", []string{"--no-such-flag"}, "no-such-flag"},
		{"simpletuner-workerd", []string{"--config"}, "flag needs an argument"},
		{"simpletuner-workerd", []string{"run"}, `unexpected argument "run"`},
		{"simpletunerctl", []string{"--no-such-flag"}, "no-such-flag"},
		{"simpletunerctl", []string{"status", "--no-such-flag"}, "no-such-flag"},
	} {
		cmd := exec.Command(filepath.Join(BinDir, c.prog), c.args...)
		cmd.Env = []string{"HOME=" + t.TempDir(), "PATH=/usr/bin:/bin"}
		var out, errOut bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errOut
		_ = cmd.Run()
		if code := cmd.ProcessState.ExitCode(); code != 2 || out.Len() != 0 || !strings.Contains(errOut.String(), c.want) {
			t.Errorf("%s %s: exit %d, stdout %q, stderr %q; want exit 2 and %q on stderr",
				c.prog, strings.Join(c.args, " "), code, out.String(), errOut.String(), c.want)
		}
	}
}
