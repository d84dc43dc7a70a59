// Package man holds the roff sources of the man pages; its test keeps them in step
// with the configuration surface the code actually has.
package man

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/simpletuner/simpletuner-orchestration/internal/config"
	"github.com/simpletuner/simpletuner-orchestration/internal/ctl"
	"github.com/simpletuner/simpletuner-orchestration/internal/ctl/ctlconf"
)

// plain turns roff source into searchable text: escapes for "-" and "." become the
// characters they print, font changes disappear.
func plain(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.NewReplacer(`\-`, "-", `\&`, "", `\fB`, "", `\fI`, "", `\fR`, "", `\fP`, "", `\(em`, "-").Replace(string(b))
}

func TestManPagesCoverConfigSurface(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		page  string
		kind  string
		names []string
	}{
		{"simpletuner-orchestratord.toml.5", "config key", config.OrchestratorKeys()},
		{"simpletuner-workerd.toml.5", "config key", config.WorkerKeys()},
		{"simpletuner-orchestratord.8", "environment variable", config.OrchestratorEnv()},
		{"simpletuner-workerd.8", "environment variable", config.WorkerEnv()},
		{"simpletuner-orchestratord.8", "flag", config.OrchestratorFlags()},
		{"simpletuner-workerd.8", "flag", config.WorkerFlags()},
	} {
		text := plain(t, tc.page)
		if len(tc.names) == 0 {
			t.Errorf("config reports no %ss for %s", tc.kind, tc.page)
		}
		for _, name := range tc.names {
			if !documents(text, tc.kind, name) {
				t.Errorf("%s: %s %q exists in code but is not documented", tc.page, tc.kind, name)
			}
		}
	}
}

// documents looks for a key as "key" inside its [section] (or dotted), and for flags
// and variables as a whole word.
func documents(text, kind, name string) bool {
	if kind == "config key" {
		if containsWord(text, name) {
			return true
		}
		// A nested table ([auth.ldap]) has its own section.
		i := strings.LastIndexByte(name, '.')
		if i < 0 {
			return false
		}
		return inSection(text, name[:i], name[i+1:]) || inSection(text, strings.SplitN(name, ".", 2)[0], strings.SplitN(name, ".", 2)[1])
	}
	return containsWord(text, name)
}

// inSection looks for key between "[section]" (or "[[section]]") and the next section.
func inSection(text, section, key string) bool {
	i := strings.Index(text, "["+section+"]")
	if i < 0 {
		return false
	}
	rest := text[i+len(section)+2:]
	if j := strings.Index(rest, ".SH "); j >= 0 {
		rest = rest[:j]
	}
	if j := strings.Index(rest, "\n.SS ["); j >= 0 { // next section
		rest = rest[:j]
	}
	return containsWord(rest, key)
}

func containsWord(text, w string) bool {
	isWord := func(b byte) bool {
		return b == '_' || b == '-' || 'a' <= b && b <= 'z' || 'A' <= b && b <= 'Z' || '0' <= b && b <= '9'
	}
	for i := 0; ; {
		j := strings.Index(text[i:], w)
		if j < 0 {
			return false
		}
		start, end := i+j, i+j+len(w)
		if (start == 0 || !isWord(text[start-1])) && (end == len(text) || !isWord(text[end])) {
			return true
		}
		i = start + 1
	}
}

// TestCtlPageCoversCommands: every command, subcommand and flag (global or
// a command's own) of simpletunerctl appears in simpletunerctl(1).
func TestCtlPageCoversCommands(t *testing.T) {
	t.Parallel()
	text := plain(t, "simpletunerctl.1")
	root := ctl.Command()
	root.InitDefaultCompletionCmd()
	seen := 0
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if c.Hidden || c.Name() == "help" || (c.HasParent() && c.Parent().Name() == "completion") {
			return
		}
		seen++
		path := strings.TrimPrefix(c.CommandPath(), root.Name()+" ")
		if c != root && !containsWord(text, path) {
			t.Errorf("simpletunerctl.1: command %q exists in code but is not documented", path)
		}
		c.LocalFlags().VisitAll(func(f *pflag.Flag) {
			if f.Hidden {
				return
			}
			if !containsWord(text, "--"+f.Name) {
				t.Errorf("simpletunerctl.1: flag --%s of %q exists in code but is not documented", f.Name, c.CommandPath())
			}
			if f.Shorthand != "" && !containsWord(text, "-"+f.Shorthand) {
				t.Errorf("simpletunerctl.1: flag -%s of %q exists in code but is not documented", f.Shorthand, c.CommandPath())
			}
		})
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
	if seen < 20 {
		t.Fatalf("walked only %d commands; is the command tree built?", seen)
	}
	for _, key := range ctlconf.Keys() {
		if !containsWord(text, key) {
			t.Errorf("simpletunerctl.1: ctl.toml key %q is not documented", key)
		}
	}
	for _, env := range []string{"SIMPLETUNER_URL", "SIMPLETUNER_ADMIN_TOKEN", "NO_COLOR"} {
		if !containsWord(text, env) {
			t.Errorf("simpletunerctl.1: environment variable %s is not documented", env)
		}
	}
}

// TestCtlPageLints runs the checker packaging uses on simpletunerctl(1):
// mandoc's warnings, else groff's.
func TestCtlPageLints(t *testing.T) {
	t.Parallel()
	var cmd *exec.Cmd
	if p, err := exec.LookPath("mandoc"); err == nil {
		cmd = exec.Command(p, "-Tlint", "-W", "warning", "simpletunerctl.1")
	} else if p, err := exec.LookPath("groff"); err == nil {
		cmd = exec.Command(p, "-man", "-ww", "-z", "simpletunerctl.1")
	} else {
		t.Skip("neither mandoc nor groff is installed")
	}
	out, err := cmd.CombinedOutput()
	if err != nil || len(strings.TrimSpace(string(out))) > 0 {
		t.Fatalf("%s: %v\n%s", strings.Join(cmd.Args, " "), err, out)
	}
}
