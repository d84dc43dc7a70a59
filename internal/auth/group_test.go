package auth

import (
	"os"
	"os/user"
	"slices"
	"strconv"
	"testing"
)

func TestInGroup(t *testing.T) {
	t.Parallel()
	me := uint32(os.Getuid())
	tests := []struct {
		name  string
		uid   uint32
		group string
		want  bool
	}{
		{"root, any group", 0, "no-such-group-xyzzy", true},
		{"root, empty group", 0, "", true},
		{"unknown group", me, "no-such-group-xyzzy", false},
		{"empty group", me, "", false},
	}
	if me == 0 {
		tests = tests[:2]
	}
	if u, err := user.Current(); err == nil {
		if g, err := user.LookupGroupId(u.Gid); err == nil {
			tests = append(tests, struct {
				name  string
				uid   uint32
				group string
				want  bool
			}{"primary group", me, g.Name, true})
		}
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := InGroup(tc.uid, tc.group)
			if err != nil {
				t.Fatalf("InGroup(%d, %q): %v", tc.uid, tc.group, err)
			}
			if got != tc.want {
				t.Errorf("InGroup(%d, %q) = %v, want %v", tc.uid, tc.group, got, tc.want)
			}
		})
	}
}

func TestInGroupUnknownUser(t *testing.T) {
	t.Parallel()
	// A uid with no passwd entry (e.g. in a container) is simply not a member.
	g, err := user.LookupGroupId("0")
	if err != nil {
		t.Skip("no group 0:", err)
	}
	if ok, err := InGroup(4_000_000_000, g.Name); ok || err != nil {
		t.Errorf("InGroup(unknown uid, %q) = %v, %v", g.Name, ok, err)
	}
}

// Exercise the non-root path even when the tests run as root, using a system
// account that most systems have.
func TestInGroupSystemUser(t *testing.T) {
	t.Parallel()
	var u *user.User
	for _, name := range []string{"nobody", "daemon", "bin"} {
		if v, err := user.Lookup(name); err == nil && v.Uid != "0" {
			u = v
			break
		}
	}
	if u == nil {
		t.Skip("no unprivileged system user")
	}
	primary, err := user.LookupGroupId(u.Gid)
	if err != nil {
		t.Skip("primary group has no name:", err)
	}
	uid64, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		t.Fatal(err)
	}
	uid := uint32(uid64)
	if ok, err := InGroup(uid, primary.Name); !ok || err != nil {
		t.Errorf("InGroup(%s, primary %q) = %v, %v", u.Username, primary.Name, ok, err)
	}
	if ok, err := InGroup(uid, "no-such-group-xyzzy"); ok || err != nil {
		t.Errorf("InGroup(%s, unknown) = %v, %v", u.Username, ok, err)
	}
	if root, err := user.LookupGroupId("0"); err == nil && primary.Gid != "0" {
		gids, err := u.GroupIds()
		if err == nil && !slices.Contains(gids, "0") {
			if ok, err := InGroup(uid, root.Name); ok || err != nil {
				t.Errorf("InGroup(%s, %q) = %v, %v", u.Username, root.Name, ok, err)
			}
		}
	}
}
