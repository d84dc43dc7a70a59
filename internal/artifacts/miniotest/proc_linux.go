package miniotest

import "syscall"

// deathSignal kills the server when the test process that started it dies.
func deathSignal() *syscall.SysProcAttr { return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} }
