//go:build !linux

package auth

import (
	"errors"
	"net"
)

// PeerCred is only implemented on Linux (SO_PEERCRED); elsewhere it fails, so
// the admin socket grants nothing.
func PeerCred(conn net.Conn) (uid, gid uint32, pid int32, err error) {
	return 0, 0, 0, errors.New("peer credentials: not supported on this platform")
}
