package orchestrator_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator"
)

// The client side of TestAdminSocketUsesTheProcessGroups: run as another
// user in its own process, it asks the admin socket for the workers and
// prints the status code.
func TestAdminSocketClientHelper(t *testing.T) {
	sock := os.Getenv("ST_ADMIN_SOCKET_CLIENT")
	if sock == "" {
		t.Skip("only a helper process of TestAdminSocketUsesTheProcessGroups")
	}
	c := http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
	res, err := c.Get("http://local/api/admin/workers")
	if err != nil {
		fmt.Printf("ERROR %v\n", err)
		return
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	fmt.Printf("STATUS %d %s\n", res.StatusCode, strings.TrimSpace(string(body)))
}

// The admin group is checked against the groups the connecting process
// really has (as the kernel recorded them for the connection), not against
// /etc/group: a user who holds the group only through their login session
// (SSSD, LDAP) gets in, one without it does not. The client runs as a uid
// with no passwd entry and gets the group only from its credentials, so the
// group database knows nothing of it.
func TestAdminSocketUsesTheProcessGroups(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: it creates a group and runs the client as another user holding it; run the tests as root to cover the admin socket's group check")
	}
	groupadd, err := exec.LookPath("groupadd")
	if err != nil {
		t.Skip("needs groupadd to create a group for the test:", err)
	}
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	name := "st-adm-" + hex.EncodeToString(b)
	if out, err := exec.Command(groupadd, name).CombinedOutput(); err != nil {
		t.Fatalf("groupadd %s: %v\n%s", name, err, out)
	}
	t.Cleanup(func() { _ = exec.Command("groupdel", name).Run() })
	g, err := user.LookupGroup(name)
	if err != nil {
		t.Fatal(err)
	}
	gid, _ := strconv.ParseUint(g.Gid, 10, 32)

	// A directory every user can enter, holding the socket and a copy of
	// this test binary (the build directory is private to root).
	dir, err := os.MkdirTemp("", "stadm")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "client")
	data, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, data, 0o755); err != nil {
		t.Fatal(err)
	}

	for _, setting := range []string{name, g.Gid} { // by name, and as a numeric gid
		t.Run("admin_group="+setting, func(t *testing.T) {
			e := setup(t, backends["sqlite"](t), func(o *orchestrator.Options) { o.AdminGroup = setting })
			sock := filepath.Join(dir, "a-"+setting+".sock")
			ln, err := net.Listen("unix", sock)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(sock, 0o777); err != nil {
				t.Fatal(err)
			}
			hs := &http.Server{Handler: e.srv.Handler(), ConnContext: e.srv.AdminConnContext}
			go hs.Serve(ln)
			t.Cleanup(func() { hs.Close() })

			const uid = 4_000_123 // no passwd entry: the group database cannot vouch for it
			for _, c := range []struct {
				groups []uint32
				want   string
			}{
				{[]uint32{uint32(gid)}, "STATUS 200"},
				{[]uint32{4_000_124}, "STATUS 403"},
				{nil, "STATUS 403"},
			} {
				cmd := exec.Command(bin, "-test.run", "^TestAdminSocketClientHelper$", "-test.v")
				cmd.Env = append(os.Environ(), "ST_ADMIN_SOCKET_CLIENT="+sock)
				cmd.Dir = dir
				cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid, Groups: c.groups}}
				out, err := cmd.CombinedOutput()
				if err != nil {
					t.Fatalf("client with groups %v: %v\n%s", c.groups, err, out)
				}
				if !strings.Contains(string(out), c.want) {
					t.Errorf("client uid %d with groups %v: want %s, got:\n%s", uid, c.groups, c.want, out)
				}
			}
		})
	}
}
