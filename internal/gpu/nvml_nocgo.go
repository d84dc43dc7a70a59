//go:build !cgo

package gpu

import "log/slog"

// NewNVML needs cgo (go-nvml dlopens libnvidia-ml); a binary built without it
// reports zero GPUs.
func NewNVML(log *slog.Logger) Source {
	if log == nil {
		log = slog.Default()
	}
	log.Warn("no NVIDIA driver found (built without cgo, NVML unavailable): reporting 0 GPUs")
	return None()
}
