//go:build !linux

package miniotest

import "syscall"

func deathSignal() *syscall.SysProcAttr { return nil }
