//go:build !faulthooks

package worker

import (
	"log/slog"

	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
)

// Release builds have no crash hook (see crashhook.go).

type crashHook struct{}

func crashHookFromEnv() *crashHook { return nil }

func (*crashHook) fire(*slog.Logger, string, *protocol.JobSubmitEvent) {}
