#!/bin/sh
# Print the version that the binaries report (make build stamps it in) and
# that the packages carry (make package): one value for both.
#
# $VERSION when set; otherwise git describe: a release tag (v1.2.0 gives
# 1.2.0), or, without one, the latest release in packaging/changelog.yaml
# with the commit as build metadata (0.1.0+git1a2b3c4, -dirty for a tree with
# changes). deb and rpm versions must start with a digit, so a leading "v" is
# dropped.
set -eu
cd "$(dirname "$0")/.."
v="${VERSION:-}"
if [ -z "$v" ]; then
	v=$(git describe --tags --always --dirty 2>/dev/null || echo unknown)
fi
v=${v#v}
case "$v" in
[0-9]*.[0-9]*) ;;
*)
	release=$(sed -n 's/^- semver: *//p' packaging/changelog.yaml | head -n 1)
	v="${release:-0.0.0}+git$v"
	;;
esac
printf '%s\n' "$v"
