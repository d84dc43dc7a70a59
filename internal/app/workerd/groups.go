package workerd

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"syscall"
)

// DropSupplementaryGroups gives up the supplementary groups workerd was
// started with, keeping its own uid and gid. They come from whoever started
// it (a root shell's group 0, sudo, a container's runtime), not from its
// configured identity: the packaged unit gives it none, and jobs get the
// groups of [job] user, not workerd's. Kept, they would count in every check
// of what workerd reads and writes as a job (checkpoint/jobfs switches only
// the filesystem uid and gid), so a job could have files of those groups
// uploaded as its own. A workerd that may not change its groups (not root,
// without CAP_SETGID) runs its jobs as itself, groups included, and keeps
// them.
func DropSupplementaryGroups(log *slog.Logger) error {
	groups, err := os.Getgroups()
	if err != nil || len(groups) == 0 {
		return err
	}
	// Go applies setgroups to every thread of the process.
	if err := syscall.Setgroups(nil); err != nil {
		if errors.Is(err, syscall.EPERM) && os.Geteuid() != 0 {
			return nil
		}
		return fmt.Errorf("dropping the supplementary groups workerd was started with (%v): %w", groups, err)
	}
	log.Info("dropped the supplementary groups workerd was started with; it keeps its own uid and gid",
		"groups", groups, "uid", os.Getuid(), "gid", os.Getgid())
	return nil
}
