package auth

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"os/user"
	"slices"
	"strconv"
	"strings"
)

// Peer is what the kernel says about the process at the other end of an
// admin-socket connection, as it was when the process connected.
type Peer struct {
	UID, GID uint32
	PID      int32
	// Groups are the supplementary groups of the peer; GroupsFrom says where
	// they were read ("SO_PEERGROUPS", "/proc/<pid>/status"), "" when they
	// could not be, in which case only NSS can tell.
	Groups     []uint32
	GroupsFrom string
}

// PeerOf reads the peer of a unix socket connection: its uid, gid and pid
// (SO_PEERCRED) and its supplementary groups: from the kernel's record of the
// connection (SO_PEERGROUPS), else from /proc/<pid>/status when that still
// describes the same user (a unit with ProtectProc=invisible cannot see it).
func PeerOf(conn net.Conn) (Peer, error) {
	uid, gid, pid, err := PeerCred(conn)
	if err != nil {
		return Peer{}, err
	}
	p := Peer{UID: uid, GID: gid, PID: pid}
	if groups, err := peerGroups(conn); err == nil {
		p.Groups, p.GroupsFrom = groups, "SO_PEERGROUPS"
	} else if groups, err := procGroups(pid, uid); err == nil {
		p.Groups, p.GroupsFrom = groups, fmt.Sprintf("/proc/%d/status", pid)
	}
	return p, nil
}

// procGroups reads the supplementary groups of process pid from
// /proc/<pid>/status, provided its real uid is still uid (the pid may have
// been reused since it connected).
func procGroups(pid int32, uid uint32) ([]uint32, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var groups []uint32
	uidOK, seenGroups := false, false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		key, val, _ := strings.Cut(sc.Text(), ":")
		fields := strings.Fields(val)
		switch key {
		case "Uid":
			uidOK = len(fields) > 0 && fields[0] == strconv.FormatUint(uint64(uid), 10)
		case "Groups":
			seenGroups = true
			for _, f := range fields {
				g, err := strconv.ParseUint(f, 10, 32)
				if err != nil {
					return nil, fmt.Errorf("/proc/%d/status: bad group %q", pid, f)
				}
				groups = append(groups, uint32(g))
			}
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if !uidOK || !seenGroups {
		return nil, fmt.Errorf("/proc/%d/status no longer describes uid %d", pid, uid)
	}
	return groups, nil
}

// LookupGroupID resolves the admin group setting: a numeric gid as is (for a
// group that only SSSD or LDAP knows, which a daemon built without cgo cannot
// look up by name), else a name from the group database. An unknown name is
// ok=false with no error.
func LookupGroupID(group string) (gid uint32, ok bool, err error) {
	if group == "" {
		return 0, false, nil
	}
	if n, err := strconv.ParseUint(group, 10, 32); err == nil {
		return uint32(n), true, nil
	}
	g, err := user.LookupGroup(group)
	if err != nil {
		if errors.As(err, new(user.UnknownGroupError)) {
			return 0, false, nil
		}
		return 0, false, fmt.Errorf("look up group %q: %w", group, err)
	}
	n, err := strconv.ParseUint(g.Gid, 10, 32)
	if err != nil {
		return 0, false, fmt.Errorf("group %q has gid %q", group, g.Gid)
	}
	return uint32(n), true, nil
}

// PeerAllowed reports whether an admin-socket peer may act as admin: root
// always may; otherwise group must be its gid or one of the supplementary
// groups the kernel recorded for it. Only when those could not be read is
// the user's membership looked up (InGroup). how says which rule decided.
func PeerAllowed(p Peer, group string) (ok bool, how string, err error) {
	if p.UID == 0 {
		return true, "root", nil
	}
	gid, known, err := LookupGroupID(group)
	if err != nil || !known {
		return false, "unknown admin group", err
	}
	if p.GroupsFrom != "" {
		return p.GID == gid || slices.Contains(p.Groups, gid), p.GroupsFrom, nil
	}
	if p.GID == gid {
		return true, "SO_PEERCRED gid", nil
	}
	ok, err = InGroup(p.UID, group)
	return ok, "group database", err
}

// InGroup reports whether uid may use the admin socket by the group
// database: uid 0 always may; otherwise the group groupName (a name or a
// numeric gid) must be the user's primary group or one of its supplementary
// groups. An unknown group or user (or an empty name) is false with no
// error; other lookup failures are returned with false. Prefer PeerAllowed,
// which sees the groups the process really has.
func InGroup(uid uint32, groupName string) (bool, error) {
	if uid == 0 {
		return true, nil
	}
	gid, known, err := LookupGroupID(groupName)
	if err != nil || !known {
		return false, err
	}
	want := strconv.FormatUint(uint64(gid), 10)
	u, err := user.LookupId(strconv.FormatUint(uint64(uid), 10))
	if err != nil {
		if errors.As(err, new(user.UnknownUserIdError)) {
			return false, nil
		}
		return false, fmt.Errorf("look up uid %d: %w", uid, err)
	}
	if u.Gid == want {
		return true, nil
	}
	gids, err := u.GroupIds()
	if err != nil {
		return false, fmt.Errorf("groups of uid %d: %w", uid, err)
	}
	return slices.Contains(gids, want), nil
}
