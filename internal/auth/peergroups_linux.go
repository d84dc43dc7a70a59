//go:build linux && !386 && !s390x

package auth

import (
	"fmt"
	"net"
	"unsafe"

	"golang.org/x/sys/unix"
)

// maxGroups is the kernel's limit on supplementary groups (NGROUPS_MAX).
const maxGroups = 65536

// peerGroups returns the supplementary groups the process at the other end
// of a unix socket had when it connected (SO_PEERGROUPS, Linux 4.13 and
// later). The kernel recorded them; the peer cannot forge them, and they
// include groups that come from SSSD or LDAP at login, which a lookup in
// /etc/group cannot see.
func peerGroups(conn net.Conn) ([]uint32, error) {
	uc, ok := conn.(*net.UnixConn)
	if !ok {
		return nil, fmt.Errorf("peer groups: %T is not a unix socket", conn)
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return nil, fmt.Errorf("peer groups: %w", err)
	}
	var groups []uint32
	var sockErr error
	if err := raw.Control(func(fd uintptr) { groups, sockErr = getPeerGroups(int(fd)) }); err != nil {
		return nil, fmt.Errorf("peer groups: %w", err)
	}
	if sockErr != nil {
		return nil, fmt.Errorf("peer groups: SO_PEERGROUPS: %w", sockErr)
	}
	return groups, nil
}

// getPeerGroups calls getsockopt itself: x/sys offers no typed helper for
// SO_PEERGROUPS, and its string helper stops at the first zero byte, which
// group ids are full of. A buffer too small is answered ERANGE with the size
// needed.
func getPeerGroups(fd int) ([]uint32, error) {
	buf := make([]uint32, 64)
	for {
		size := uint32(len(buf) * 4)
		_, _, errno := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), unix.SOL_SOCKET, unix.SO_PEERGROUPS,
			uintptr(unsafe.Pointer(&buf[0])), uintptr(unsafe.Pointer(&size)), 0)
		switch {
		case errno == 0:
			return buf[:size/4], nil
		case errno == unix.ERANGE && int(size/4) > len(buf) && size/4 <= maxGroups:
			buf = make([]uint32, size/4)
		default:
			return nil, errno
		}
	}
}
