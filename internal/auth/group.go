package auth

import (
	"errors"
	"fmt"
	"os/user"
	"slices"
	"strconv"
)

// InGroup reports whether uid may use the admin socket: uid 0 always may;
// otherwise the group groupName must be the user's primary group or one of
// its supplementary groups. An unknown group or user (or an empty name) is
// false with no error; other lookup failures are returned with false.
func InGroup(uid uint32, groupName string) (bool, error) {
	if uid == 0 {
		return true, nil
	}
	if groupName == "" {
		return false, nil
	}
	g, err := user.LookupGroup(groupName)
	if err != nil {
		if errors.As(err, new(user.UnknownGroupError)) {
			return false, nil
		}
		return false, fmt.Errorf("look up group %q: %w", groupName, err)
	}
	u, err := user.LookupId(strconv.FormatUint(uint64(uid), 10))
	if err != nil {
		if errors.As(err, new(user.UnknownUserIdError)) {
			return false, nil
		}
		return false, fmt.Errorf("look up uid %d: %w", uid, err)
	}
	if u.Gid == g.Gid {
		return true, nil
	}
	gids, err := u.GroupIds()
	if err != nil {
		return false, fmt.Errorf("groups of uid %d: %w", uid, err)
	}
	return slices.Contains(gids, g.Gid), nil
}
