#!/bin/sh
# Build dist/*.deb and dist/*.rpm, one package per program (packaging/nfpm/*.yaml),
# and list what went into them. Expects bin/ (make build), man/out/ (make man) and
# packaging/completions/ (make completions). nfpm runs through the Go toolchain at
# a pinned version, outside go.mod.
set -eu
cd "$(dirname "$0")/.."
NFPM="${NFPM:-go run github.com/goreleaser/nfpm/v2/cmd/nfpm@v2.45.0}"

VERSION=$(./packaging/version.sh)
export VERSION

for f in bin/simpletuner-orchestratord bin/simpletuner-workerd bin/simpletunerctl \
	etc/orchestratord.toml etc/workerd.toml packaging/completions/simpletunerctl; do
	[ -e "$f" ] || { echo "missing $f (run make build completions)" >&2; exit 1; }
done
# A package carries the version its binaries report, or it is not built.
for cmd in "bin/simpletuner-orchestratord --version" "bin/simpletuner-workerd --version" "bin/simpletunerctl version"; do
	got=$($cmd | awk '{print $NF}')
	if [ "$got" != "$VERSION" ]; then
		echo "${cmd%% *} reports version $got, the packages would be $VERSION: build both with make package VERSION=$VERSION" >&2
		exit 1
	fi
done
[ -e man/out/simpletunerctl.1.gz ] || ./packaging/build-man.sh

rm -rf dist # no stale packages from an earlier version
mkdir -p dist/conf
for conf in packaging/nfpm/*.yaml; do
	# A deb control file has no License field (lintian: unknown-field); the
	# deb names its licence in /usr/share/doc/<package>/copyright instead.
	sed '/^license:/d' "$conf" >"dist/conf/deb-$(basename "$conf")"
	for fmt in deb rpm; do
		c="$conf"
		[ "$fmt" = deb ] && c="dist/conf/deb-$(basename "$conf")"
		# GOFLAGS from the project (e.g. -mod=vendor) must not reach nfpm's own module.
		GOFLAGS= $NFPM package -p "$fmt" -f "$c" -t dist/
	done
done
rm -rf dist/conf

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
