// Package version carries the release string stamped in at link time.
package version

// Version is set with -ldflags "-X .../internal/version.Version=v1.2.3".
var Version = "dev"
