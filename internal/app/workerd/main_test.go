package workerd

import (
	"bytes"
	"strings"
	"testing"
)

func runMain(args ...string) (code int, stdout, stderr string) {
	var out, errb bytes.Buffer
	code = Main(args, func(string) string { return "" }, &out, &errb)
	return code, out.String(), errb.String()
}

// Help goes to stdout with exit 0; a command line workerd cannot use is a
// configuration error (exit 1) naming the flag or argument.
func TestCommandLineUsage(t *testing.T) {
	code, out, _ := runMain("--help")
	if code != ExitOK || !strings.HasPrefix(out, "Usage:") || strings.Contains(out, "help requested") {
		t.Errorf("--help: exit %d:\n%s", code, out)
	}
	for _, want := range []string{"  --config file ", "  --orchestrator-url URL ", "  -v, --verbose ", "simpletuner-workerd(8)"} {
		if !strings.Contains(out, want) {
			t.Errorf("--help lacks %q:\n%s", want, out)
		}
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--bogus"}, "flag provided but not defined: --bogus"},
		{[]string{"--config", "/nonexistent.toml", "run"}, `unexpected argument "run"`},
	} {
		code, out, errOut := runMain(c.args...)
		if code != ExitConfig || out != "" || !strings.HasPrefix(errOut, "simpletuner-workerd: ") || !strings.Contains(errOut, c.want) {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want exit 1 and %q", c.args, code, out, errOut, c.want)
		}
	}
}
