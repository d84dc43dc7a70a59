#!/bin/sh
# CI gate for the packages: build .deb and .rpm, compare their file lists with what
# must be shipped, run lintian on the .deb (errors fail), install the .deb with dpkg
# into a throwaway root (maintainer scripts included, via DPKG_ROOT) and run
# simpletuner-orchestratord --check-config from it, then purge.
# Needs: go, dpkg, lintian, rpm (for rpm -qlp), systemd (sysusers, tmpfiles).
# Debian/Ubuntu: apt-get install lintian rpm mandoc systemd
set -eu
cd "$(dirname "$0")/.."

make build man
./packaging/build-packages.sh >/dev/null
deb=$(ls dist/*.deb)
rpmf=$(ls dist/*.rpm)

must_have='
/usr/bin/simpletuner-orchestratord
/usr/bin/simpletuner-workerd
/usr/lib/systemd/system/simpletuner-orchestratord.service
/usr/lib/systemd/system/simpletuner-orchestratord.socket
/usr/lib/systemd/system/simpletuner-orchestratord-admin.socket
/usr/lib/systemd/system/simpletuner-workerd.service
/usr/lib/sysusers.d/simpletuner.conf
/usr/lib/tmpfiles.d/simpletuner.conf
/etc/simpletuner/orchestratord.toml
/etc/simpletuner/workerd.toml
/etc/simpletuner/configs
/usr/share/man/man8/simpletuner-orchestratord.8.gz
/usr/share/man/man8/simpletuner-workerd.8.gz
/usr/share/man/man5/simpletuner-orchestratord.toml.5.gz
/usr/share/man/man5/simpletuner-workerd.toml.5.gz
'
deb_list=$(dpkg-deb -c "$deb" | awk '{print $6}' | sed 's|^\./|/|; s|/$||')
for f in $must_have /usr/share/doc/simpletuner-orchestration/copyright /usr/share/doc/simpletuner-orchestration/changelog.Debian.gz; do
	printf '%s\n' "$deb_list" | grep -qx "$f" || { echo "deb lacks $f" >&2; exit 1; }
done
dpkg-deb -I "$deb" conffiles | grep -qx /etc/simpletuner/orchestratord.toml
dpkg-deb -I "$deb" conffiles | grep -qx /etc/simpletuner/workerd.toml
if command -v rpm >/dev/null 2>&1; then
	rpm_list=$(rpm -qlp "$rpmf")
	for f in $must_have; do
		printf '%s\n' "$rpm_list" | grep -qx "$f" || { echo "rpm lacks $f" >&2; exit 1; }
	done
	rpm -qcp "$rpmf" | grep -qx /etc/simpletuner/orchestratord.toml
	rpm -qp --scripts "$rpmf" | grep -q systemd-sysusers
else
	echo "rpm not installed; rpm file list not checked" >&2
fi

# lintian exits non-zero on errors (not on warnings) with --fail-on error.
lintian --fail-on error "$deb"

root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
mkdir -p "$root/var/lib/dpkg/info" "$root/var/lib/dpkg/updates" "$root/etc"
: >"$root/var/lib/dpkg/status"
for f in passwd group shadow gshadow; do : >"$root/etc/$f"; done
dpkg --root="$root" --force-script-chrootless --force-not-root --force-depends \
	--log=/dev/null -i "$deb"
grep -q '^simpletuner:' "$root/etc/passwd"
test -d "$root/var/lib/simpletuner"
"$root/usr/bin/simpletuner-orchestratord" --check-config --config "$root/etc/simpletuner/orchestratord.toml"
"$root/usr/bin/simpletuner-workerd" --version
dpkg --root="$root" --force-script-chrootless --force-not-root --log=/dev/null --purge simpletuner-orchestration
test ! -e "$root/var/lib/simpletuner"
test ! -e "$root/usr/bin/simpletuner-orchestratord"

# The orchestrator's hardening score is part of the gate.
go test -count=1 -run 'SecurityScore|UnitsVerify' ./packaging/
echo "packages OK: $deb $rpmf"
