//go:build !linux || 386 || s390x

package auth

import (
	"errors"
	"net"
)

// peerGroups is not available here; callers fall back to /proc or NSS.
func peerGroups(net.Conn) ([]uint32, error) {
	return nil, errors.New("peer groups: SO_PEERGROUPS is not supported on this platform")
}
