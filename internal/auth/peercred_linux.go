package auth

import (
	"errors"
	"fmt"
	"net"

	"golang.org/x/sys/unix"
)

// PeerCred returns the credentials of the process at the other end of a unix
// socket connection, as the kernel recorded them at connect time
// (SO_PEERCRED); the peer cannot forge them.
func PeerCred(conn net.Conn) (uid, gid uint32, pid int32, err error) {
	uc, ok := conn.(*net.UnixConn)
	if !ok {
		return 0, 0, 0, fmt.Errorf("peer credentials: %T is not a unix socket", conn)
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return 0, 0, 0, fmt.Errorf("peer credentials: %w", err)
	}
	var cred *unix.Ucred
	var sockErr error
	if err := raw.Control(func(fd uintptr) {
		cred, sockErr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return 0, 0, 0, fmt.Errorf("peer credentials: %w", err)
	}
	if sockErr != nil {
		return 0, 0, 0, fmt.Errorf("peer credentials: SO_PEERCRED: %w", sockErr)
	}
	if cred == nil {
		return 0, 0, 0, errors.New("peer credentials: none returned")
	}
	return cred.Uid, cred.Gid, cred.Pid, nil
}
