//go:build !faulthooks

package worker

import "time"

// Release builds report the real clock (see clockhook.go).

func clockOffsetFromEnv() time.Duration { return 0 }
