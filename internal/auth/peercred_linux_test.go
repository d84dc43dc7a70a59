package auth

import (
	"net"
	"os"
	"path/filepath"
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
