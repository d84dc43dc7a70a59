package daemon

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/coreos/go-systemd/v22/activation"
)

// ListenSpec names one logical listener and where to bind it when systemd did not pass
// a socket of that name (FileDescriptorName= in the .socket unit).
type ListenSpec struct {
	Name string // "api", "admin", "metrics"; matches FileDescriptorName=
	// Addrs are "host:port" or "unix:/path/to.sock". Empty means: only when activated.
	Addrs     []string
	UnixMode  os.FileMode // chmod for sockets we bind; 0 → 0660
	UnixGroup string      // chgrp sockets we bind, when this group exists
}

var (
	activatedMu    sync.Mutex
	activatedNames = map[string]bool{}
)

// Activated reports whether the listeners Listen returned for name came from socket
// activation rather than from the configured addresses.
func Activated(name string) bool {
	activatedMu.Lock()
	defer activatedMu.Unlock()
	return activatedNames[name]
}

// Listen returns listeners per spec name. Socket-activated fds whose name matches a spec
// win; other specs are bound from their Addrs. LISTEN_* is removed from the environment
// so child processes never see it. An activated fd whose name matches no spec is an
// error, because it means the .socket units and the config disagree.
func Listen(specs []ListenSpec) (map[string][]net.Listener, error) {
	activated, err := activation.ListenersWithNames()
	if err != nil {
		return nil, fmt.Errorf("socket activation: %w", err)
	}
	out := map[string][]net.Listener{}
	fail := func(err error) (map[string][]net.Listener, error) {
		closeAll(out)
		closeAll(activated)
		return nil, err
	}

	want := map[string]bool{}
	for _, s := range specs {
		if s.Name == "" {
			return fail(errors.New("listen: spec without a name"))
		}
		if want[s.Name] {
			return fail(fmt.Errorf("listen: duplicate name %q", s.Name))
		}
		want[s.Name] = true
	}
	for name := range activated {
		if !want[name] {
			return fail(fmt.Errorf("listen: socket-activated fd named %q matches no listener (expected one of %s); check FileDescriptorName= in the .socket units",
				name, strings.Join(sortedKeys(want), ", ")))
		}
	}

	activatedMu.Lock()
	defer activatedMu.Unlock()
	for _, s := range specs {
		if ls := activated[s.Name]; len(ls) > 0 {
			out[s.Name] = ls
			delete(activated, s.Name)
			activatedNames[s.Name] = true
			continue
		}
		activatedNames[s.Name] = false
		for _, addr := range s.Addrs {
			l, err := bind(s, addr)
			if err != nil {
				return fail(fmt.Errorf("listen %s on %s: %w", s.Name, addr, err))
			}
			out[s.Name] = append(out[s.Name], l)
		}
	}
	return out, nil
}

func bind(s ListenSpec, addr string) (net.Listener, error) {
	path, isUnix := strings.CutPrefix(addr, "unix:")
	if !isUnix {
		return net.Listen("tcp", addr)
	}
	path = strings.TrimPrefix(path, "//") // accept unix:///run/x.sock too
	if !filepath.IsAbs(path) {
		return nil, fmt.Errorf("unix socket path %q is not absolute", path)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, err
	}
	if err := removeStaleSocket(path); err != nil {
		return nil, err
	}
	l, err := net.Listen("unix", path)
	if err != nil {
		return nil, err
	}
	mode := s.UnixMode
	if mode == 0 {
		mode = 0o660
	}
	if err := os.Chmod(path, mode); err != nil {
		l.Close()
		return nil, err
	}
	if s.UnixGroup != "" {
		if g, err := user.LookupGroup(s.UnixGroup); err == nil {
			gid, _ := strconv.Atoi(g.Gid)
			if err := os.Chown(path, -1, gid); err != nil {
				l.Close()
				return nil, fmt.Errorf("chgrp %s: %w", s.UnixGroup, err)
			}
		}
	}
	return l, nil
}

// removeStaleSocket deletes a socket file left by a crashed run, but never a live
// socket (another instance is serving on it) and never something that is not a socket.
func removeStaleSocket(path string) error {
	fi, err := os.Lstat(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if fi.Mode().Type() != os.ModeSocket {
		return fmt.Errorf("%s exists and is not a socket; refusing to remove it", path)
	}
	if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
		c.Close()
		return fmt.Errorf("%s is in use by another process", path)
	}
	return os.Remove(path)
}

func closeAll(m map[string][]net.Listener) {
	for _, ls := range m {
		for _, l := range ls {
			l.Close()
		}
	}
}

func sortedKeys(m map[string]bool) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}
