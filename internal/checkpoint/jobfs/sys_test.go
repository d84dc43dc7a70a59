package jobfs

import (
	"io/fs"
	"syscall"
)

func mkfifo(path string) error { return syscall.Mkfifo(path, 0o600) }

func ownerOf(st fs.FileInfo) int {
	if st == nil {
		return -1
	}
	return int(st.Sys().(*syscall.Stat_t).Uid)
}
