package ctlconf

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func write(t *testing.T, body string, mode os.FileMode) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "ctl.toml")
	if err := os.WriteFile(p, []byte(body), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil { // past the umask
		t.Fatal(err)
	}
	return p
}

func TestLoad(t *testing.T) {
	p := write(t, "# settings\nurl = \"https://orch:8001\"\ntoken_file = \"tok\"\nca_file = \"/etc/ca.pem\"\n", 0o600)
	f, err := Load(p)
	if err != nil {
		t.Fatal(err)
	}
	if f.URL != "https://orch:8001" || f.TokenFile != filepath.Join(filepath.Dir(p), "tok") || f.CAFile != "/etc/ca.pem" || f.Path != p {
		t.Fatalf("%+v", f)
	}
	if f, err := Load(filepath.Join(t.TempDir(), "absent.toml")); f != nil || err != nil {
		t.Fatalf("a missing file: %v %v", f, err)
	}
}

// TestRefusesReadableByOthers: the file may hold a token, so any access for
// group or others is refused with the file's name and the fix.
func TestRefusesReadableByOthers(t *testing.T) {
	for _, mode := range []os.FileMode{0o644, 0o640, 0o604, 0o620, 0o606} {
		p := write(t, "token = \"sta_x\"\n", mode)
		_, err := Load(p)
		if err == nil {
			t.Fatalf("mode %04o accepted", mode)
		}
		for _, want := range []string{p, "chmod 600 " + p, "group or others"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("mode %04o: %q lacks %q", mode, err, want)
			}
		}
		if strings.Contains(err.Error(), "sta_x") {
			t.Errorf("the error shows the token: %v", err)
		}
	}
	for _, mode := range []os.FileMode{0o600, 0o400} {
		if _, err := Load(write(t, "", mode)); err != nil {
			t.Errorf("mode %04o refused: %v", mode, err)
		}
	}
}

func TestParseErrorsNameFileAndLine(t *testing.T) {
	for _, tc := range []struct{ body, want string }{
		{"url = \"x\"\nbogus = 1\n", "ctl.toml:2: unknown key \"bogus\""},
		{"\n\nurl = 5\n", "ctl.toml:3: key url must be a string"},
		{"url = \"x\"\n[server]\nlisten = 1\n", "ctl.toml:2: unknown key \"server\""},
		{"url = \n", "ctl.toml:1:"},
		{"a = 1\nb = 2\n", "ctl.toml:1: unknown key \"a\""},
	} {
		_, err := Parse("ctl.toml", []byte(tc.body))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want %q", tc.body, err, tc.want)
		}
	}
	// Every mistake is reported at once.
	_, err := Parse("ctl.toml", []byte("a = 1\nb = 2\n"))
	if err == nil || !strings.Contains(err.Error(), "ctl.toml:2: unknown key \"b\"") {
		t.Errorf("second mistake not reported: %v", err)
	}
}

func TestDefaultPath(t *testing.T) {
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	if got := DefaultPath(env(map[string]string{"HOME": "/home/a"})); got != "/home/a/.config/simpletuner/ctl.toml" {
		t.Error(got)
	}
	if got := DefaultPath(env(map[string]string{"HOME": "/home/a", "XDG_CONFIG_HOME": "/x"})); got != "/x/simpletuner/ctl.toml" {
		t.Error(got)
	}
	if got := DefaultPath(env(map[string]string{"HOME": "/home/a", "XDG_CONFIG_HOME": "rel"})); got != "/home/a/.config/simpletuner/ctl.toml" {
		t.Error("a relative XDG_CONFIG_HOME must be ignored:", got)
	}
	if got := DefaultPath(env(nil)); got != "" {
		t.Error(got)
	}
}

// FuzzParse: any content yields a File or an error naming the file, never a
// panic; a File's values are what the TOML said.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"url = \"http://h:1\"\ntoken = \"sta_x\"\n", "[x]\ny=1", "url = 5", "token_file = \"t\"", "\"url\" = \"q\""} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		file, err := Parse("/etc/ctl.toml", in)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "/etc/ctl.toml") {
				t.Fatalf("error does not name the file: %v", err)
			}
			return
		}
		if file.TokenFile != "" && !filepath.IsAbs(file.TokenFile) {
			t.Fatalf("token_file %q is not absolute", file.TokenFile)
		}
	})
}
