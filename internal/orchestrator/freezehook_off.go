//go:build !faulthooks

package orchestrator

import "context"

// Release builds have no freeze hook (see freezehook.go).

func freezeFileFromEnv() string { return "" }

func (s *Server) freezeWhileFileExists(context.Context) {}
