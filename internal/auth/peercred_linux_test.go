package auth

import (
	"net"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func TestPeerCred(t *testing.T) {
	t.Parallel()
	// Short directory: unix socket paths are limited to ~107 bytes.
	dir, err := os.MkdirTemp("", "authpc")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	ln, err := net.Listen("unix", filepath.Join(dir, "s.sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			close(accepted)
			return
		}
		accepted <- c
	}()
	client, err := net.Dial("unix", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	server, ok := <-accepted
	if !ok {
		t.Fatal("accept failed")
	}
	defer server.Close()

	for name, c := range map[string]net.Conn{"server side": server, "client side": client} {
		uid, gid, pid, err := PeerCred(c)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if uid != uint32(os.Getuid()) || gid != uint32(os.Getgid()) || pid != int32(os.Getpid()) {
			t.Errorf("%s: got uid=%d gid=%d pid=%d, want %d %d %d",
				name, uid, gid, pid, os.Getuid(), os.Getgid(), os.Getpid())
		}
	}
}

func TestPeerCredRejectsNonUnix(t *testing.T) {
	t.Parallel()
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	if _, _, _, err := PeerCred(a); err == nil {
		t.Fatal("PeerCred on a pipe succeeded")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Skip("no loopback TCP:", err)
	}
	defer ln.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, _, _, err := PeerCred(c); err == nil {
		t.Fatal("PeerCred on TCP succeeded")
	}
}

// PeerOf reads the groups the kernel recorded for the connecting process;
// they are this process's own here.
func TestPeerOfGroups(t *testing.T) {
	t.Parallel()
	dir, err := os.MkdirTemp("", "authpg")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	ln, err := net.Listen("unix", filepath.Join(dir, "s.sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		if c, err := net.Dial("unix", ln.Addr().String()); err == nil {
			defer c.Close()
			_, _ = c.Read(make([]byte, 1))
		}
	}()
	server, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer server.Close()
	p, err := PeerOf(server)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := os.Getgroups()
	var got []int
	for _, g := range p.Groups {
		got = append(got, int(g))
	}
	slices.Sort(want)
	slices.Sort(got)
	if p.GroupsFrom != "SO_PEERGROUPS" || !slices.Equal(got, want) {
		t.Fatalf("groups %v from %q; want %v from SO_PEERGROUPS", got, p.GroupsFrom, want)
	}
	proc, err := procGroups(int32(os.Getpid()), uint32(os.Getuid()))
	if err != nil {
		t.Fatal(err)
	}
	if len(proc) != len(want) {
		t.Fatalf("/proc groups %v; want %v", proc, want)
	}
	if _, err := procGroups(int32(os.Getpid()), uint32(os.Getuid())+1); err == nil {
		t.Fatal("/proc/<pid>/status of another uid was accepted")
	}
}

func TestPeerAllowed(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		p     Peer
		group string
		want  bool
	}{
		{Peer{UID: 0}, "no-such-group-xyzzy", true},
		{Peer{UID: 4_000_123, GID: 7, Groups: []uint32{4_000_555}, GroupsFrom: "SO_PEERGROUPS"}, "4000555", true},
		{Peer{UID: 4_000_123, GID: 4_000_555, GroupsFrom: "SO_PEERGROUPS"}, "4000555", true},
		{Peer{UID: 4_000_123, GID: 7, Groups: []uint32{8}, GroupsFrom: "SO_PEERGROUPS"}, "4000555", false},
		{Peer{UID: 4_000_123, GID: 7}, "4000555", false}, // no groups read, no passwd entry
		{Peer{UID: 4_000_123, Groups: []uint32{1}, GroupsFrom: "SO_PEERGROUPS"}, "no-such-group-xyzzy", false},
		{Peer{UID: 4_000_123, Groups: []uint32{1}, GroupsFrom: "SO_PEERGROUPS"}, "", false},
	} {
		if got, how, err := PeerAllowed(c.p, c.group); got != c.want || err != nil {
			t.Errorf("PeerAllowed(%+v, %q) = %v (%s) %v; want %v", c.p, c.group, got, how, err, c.want)
		}
	}
}
