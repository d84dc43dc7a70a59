#!/bin/sh
# Build dist/*.deb and dist/*.rpm from nfpm.yaml and list what went into them.
# Expects bin/ (make build) and man/out/ (make man). nfpm runs through the Go
# toolchain at a pinned version, outside go.mod.
set -eu
cd "$(dirname "$0")/.."
NFPM="${NFPM:-go run github.com/goreleaser/nfpm/v2/cmd/nfpm@v2.45.0}"

if [ -z "${VERSION:-}" ]; then
	VERSION=$(git describe --tags --always --dirty 2>/dev/null || echo 0.0.0)
fi
# deb and rpm versions must start with a digit.
VERSION=$(printf '%s' "$VERSION" | sed 's/^v//')
# Without a release tag, describe gives a bare commit hash, which may start with a
# letter or a leading zero: make it build metadata of a 0.1.0 pre-release.
case "$VERSION" in [0-9]*.[0-9]*) ;; *) VERSION="0.1.0+git$VERSION" ;; esac
export VERSION

for f in bin/simpletuner-orchestratord bin/simpletuner-workerd etc/orchestratord.toml etc/workerd.toml; do
	[ -e "$f" ] || { echo "missing $f (run make build)" >&2; exit 1; }
done
[ -e man/out/simpletuner-orchestratord.8.gz ] || ./packaging/build-man.sh

rm -rf dist # no stale packages from an earlier version
mkdir -p dist
for fmt in deb rpm; do
	# GOFLAGS from the project (e.g. -mod=vendor) must not reach nfpm's own module.
	GOFLAGS= $NFPM package -p "$fmt" -f nfpm.yaml -t dist/
done

for deb in dist/*.deb; do
	echo "== $deb"
	dpkg-deb -c "$deb"
done
if command -v rpm >/dev/null 2>&1; then
	for r in dist/*.rpm; do
		echo "== $r"
		rpm -qlp "$r"
	done
fi
