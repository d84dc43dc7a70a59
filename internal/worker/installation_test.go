package worker

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func TestInstallationIDSurvivesRestarts(t *testing.T) {
	dir := t.TempDir()
	a, err := installationID(dir)
	if err != nil || !validInstallationID(a) {
		t.Fatalf("first id %q: %v", a, err)
	}
	if b, err := installationID(dir); err != nil || b != a {
		t.Fatalf("second read %q (%v), want %q", b, err, a)
	}
	if c, _ := installationID(t.TempDir()); c == a {
		t.Fatalf("two state directories share id %q", a)
	}
	if err := os.WriteFile(filepath.Join(dir, installationFile), []byte("garbage\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if d, err := installationID(dir); err != nil || !validInstallationID(d) || d == a {
		t.Fatalf("a garbled id file should give a fresh id, got %q (%v)", d, err)
	}
}

func TestStateDirLockedOnce(t *testing.T) {
	dir := t.TempDir()
	f, err := lockStateDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lockStateDir(dir); !errors.Is(err, ErrStateDirInUse) {
		t.Fatalf("second lock: %v, want ErrStateDirInUse", err)
	}
	f.Close()
	g, err := lockStateDir(dir)
	if err != nil {
		t.Fatalf("lock after release: %v", err)
	}
	g.Close()
}
