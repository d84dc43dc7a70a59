package webhook

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// signatureDocs is the "Checking the signature" section of
// docs/webhooks.md, up to the next section of its level.
func signatureDocs(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("../../docs/webhooks.md")
	if err != nil {
		t.Fatal(err)
	}
	_, sec, ok := strings.Cut(string(b), "\n## Checking the signature\n")
	if !ok {
		t.Fatal("docs/webhooks.md has no section \"Checking the signature\"")
	}
	sec, _, _ = strings.Cut(sec, "\n## ")
	return sec
}

// codeBlock is the one fenced block of lang in doc.
func codeBlock(t *testing.T, doc, lang string) string {
	t.Helper()
	parts := strings.Split(doc, "```"+lang+"\n")
	if len(parts) != 2 {
		t.Fatalf("want one ```%s block in the section, got %d", lang, len(parts)-1)
	}
	code, _, ok := strings.Cut(parts[1], "\n```")
	if !ok {
		t.Fatalf("the ```%s block is not closed", lang)
	}
	return code + "\n"
}

// need skips the test where a tool the snippet runs is missing.
func need(t *testing.T, tool string) string {
	t.Helper()
	p, err := exec.LookPath(tool)
	if err != nil {
		t.Skipf("%s is not installed", tool)
	}
	return p
}

func runIn(t *testing.T, dir, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOFLAGS=")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %v: %v\n%s", name, args, err, out)
	}
	return string(out)
}

// The worked example the docs give is the one Sign makes.
func TestDocsWorkedExample(t *testing.T) {
	t.Parallel()
	doc := signatureDocs(t)
	for _, want := range []string{exampleSecret, exampleID, "1764107843", exampleBody, "X-SimpleTuner-Signature: " + exampleHeader} {
		if !strings.Contains(doc, want) {
			t.Errorf("the worked example in docs/webhooks.md lacks %q", want)
		}
	}
}

// The shell lines print the example's v2, as the docs say.
func TestDocsShellSnippet(t *testing.T) {
	t.Parallel()
	need(t, "openssl")
	dir := t.TempDir()
	script := filepath.Join(dir, "check.sh")
	if err := os.WriteFile(script, []byte(codeBlock(t, signatureDocs(t), "sh")), 0o600); err != nil {
		t.Fatal(err)
	}
	got := strings.TrimSpace(runIn(t, dir, need(t, "bash"), "-eu", "-o", "pipefail", script))
	_, v2, _ := strings.Cut(exampleHeader, ",v2=")
	v2, _, _ = strings.Cut(v2, ",")
	if got != v2 {
		t.Fatalf("the shell snippet printed %q, want %q", got, v2)
	}
}

// The Python verify accepts the worked example and refuses it with
// another event ID or once stale.
func TestDocsPythonSnippet(t *testing.T) {
	t.Parallel()
	py := need(t, "python3")
	dir := t.TempDir()
	code := codeBlock(t, signatureDocs(t), "python") + `
secret, header, body = b"` + exampleSecret + `", "` + exampleHeader + `", b'` + exampleBody + `'
assert verify(secret, "` + exampleID + `", header, body, now=1764107843 + 60)
assert not verify(secret, "evt_other", header, body, now=1764107843)
assert not verify(secret, "` + exampleID + `", header, body + b" ", now=1764107843)
assert not verify(secret, "` + exampleID + `", header, body, now=1764107843 + 301)
print("ok")
`
	file := filepath.Join(dir, "check.py")
	if err := os.WriteFile(file, []byte(code), 0o600); err != nil {
		t.Fatal(err)
	}
	if out := runIn(t, dir, py, file); strings.TrimSpace(out) != "ok" {
		t.Fatalf("python: %s", out)
	}
}

// The Go verify, compiled as printed, accepts the worked example and
// refuses it with another event ID or once stale.
func TestDocsGoSnippet(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("compiles a program")
	}
	goBin := need(t, "go")
	dir := t.TempDir()
	code := `package main

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

` + codeBlock(t, signatureDocs(t), "go") + `
func main() {
	header, body, at := "` + exampleHeader + `", []byte(` + "`" + exampleBody + "`" + `), time.Unix(1764107843, 0)
	ok := verify("` + exampleSecret + `", "` + exampleID + `", header, body, at.Add(time.Minute)) &&
		!verify("` + exampleSecret + `", "evt_other", header, body, at) &&
		!verify("` + exampleSecret + `", "` + exampleID + `", header, append(body, ' '), at) &&
		!verify("` + exampleSecret + `", "` + exampleID + `", header, body, at.Add(301*time.Second))
	if !ok {
		fmt.Println("verify disagrees with the worked example")
		os.Exit(1)
	}
	fmt.Println("ok")
}
`
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(code), 0o600); err != nil {
		t.Fatal(err)
	}
	if out := runIn(t, dir, goBin, "run", "main.go"); strings.TrimSpace(out) != "ok" {
		t.Fatalf("go: %s", out)
	}
}
