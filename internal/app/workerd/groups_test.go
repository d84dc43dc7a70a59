package workerd

import (
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/simpletuner/simpletuner-orchestration/internal/checkpoint/jobfs"
)

// workerd started from a root shell holds group 0 besides its own gid: a
// read made as a job (its fsuid and fsgid) would still pass group 0's
// checks. Once workerd dropped its supplementary groups at start, a file
// only group 0 may read is refused to the job. The drop changes every
// thread of the process, so it runs in a child started with group 0 and
// another group.
func TestDropsSupplementaryGroups(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("starting a process with other groups needs root")
	}
	t.Parallel()
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	secret := filepath.Join(dir, "group-0-only")
	if err := os.WriteFile(secret, []byte("root's"), 0o640); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(secret, 0, 0); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestGroupsHelper$", "-test.v")
	cmd.Env = append(os.Environ(), "WORKERD_GROUPS_HELPER="+secret)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 0, Gid: 0, Groups: []uint32{0, 4242}}}
	out, err := cmd.CombinedOutput()
	t.Logf("helper:\n%s", out)
	if err != nil {
		t.Fatalf("helper: %v", err)
	}
	for _, want := range []string{"before: the job read it", "dropped the supplementary groups", "groups=\"[0 4242]\"",
		"after: refused", "groups left: []"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("helper output lacks %q", want)
		}
	}
}

// TestGroupsHelper is TestDropsSupplementaryGroups's child.
func TestGroupsHelper(t *testing.T) {
	secret := os.Getenv("WORKERD_GROUPS_HELPER")
	if secret == "" {
		t.Skip("run by TestDropsSupplementaryGroups")
	}
	job := jobfs.Ident{UID: 1879113005, GID: 1879113005, Switch: true}
	read := func() error {
		d, err := jobfs.Open(filepath.Dir(secret), "", job)
		if err != nil {
			return err
		}
		defer d.Close()
		f, err := d.OpenFile(filepath.Base(secret))
		if err == nil {
			f.Close()
		}
		return err
	}
	if err := read(); err == nil {
		t.Log("before: the job read it")
	} else {
		t.Logf("before: %v", err)
	}
	if err := DropSupplementaryGroups(slog.New(slog.NewTextHandler(os.Stdout, nil))); err != nil {
		t.Fatal(err)
	}
	if err := read(); errors.Is(err, fs.ErrPermission) {
		t.Log("after: refused")
	} else {
		t.Errorf("after: %v", err)
	}
	groups, _ := os.Getgroups()
	t.Logf("groups left: %v", groups)
}
