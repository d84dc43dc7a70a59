#!/bin/sh
# CI gate for the packages (one per program: simpletuner-orchestratord,
# simpletuner-workerd, simpletunerctl): build .deb and .rpm, check each one's file
# list and conffiles, run lintian on each .deb (any warning fails), then in a
# throwaway root with maintainer scripts (DPKG_ROOT): install, run the binaries,
# upgrade to a newer version and check an edited config survives, remove (state
# stays), purge (state goes).
# Needs: go, dpkg, lintian, rpm (for rpm -qlp), systemd (sysusers, tmpfiles).
# Debian/Ubuntu: apt-get install lintian rpm mandoc systemd
set -eu
cd "$(dirname "$0")/.."

old=$(mktemp -d)
root=$(mktemp -d)
trap 'rm -rf "$root" "$old"' EXIT
make package VERSION=0.1.0 >/dev/null
mv dist/*.deb "$old/"
make package VERSION=0.2.0 >/dev/null

deb() { ls "dist/${2:-}$1"_*.deb; }
rpmf() { ls dist/"$1"-*.rpm; }

check_list() { # check_list PACKAGE FILE...
	pkg=$1
	shift
	list=$(dpkg-deb -c "$(deb "$pkg")" | awk '{print $6}' | sed 's|^\./|/|; s|/$||')
	for f in "$@" "/usr/share/doc/$pkg/copyright" "/usr/share/doc/$pkg/changelog.Debian.gz"; do
		printf '%s\n' "$list" | grep -qx "$f" || { echo "$pkg.deb lacks $f" >&2; exit 1; }
	done
	if command -v rpm >/dev/null 2>&1; then
		list=$(rpm -qlp "$(rpmf "$pkg")")
		for f in "$@"; do
			f=$(printf '%s' "$f" | sed 's|^/usr/share/zsh/vendor-completions/|/usr/share/zsh/site-functions/|') # zsh's path on Fedora/RHEL
			printf '%s\n' "$list" | grep -qx "$f" || { echo "$pkg.rpm lacks $f" >&2; exit 1; }
		done
	fi
}

check_list simpletuner-orchestratord /usr/bin/simpletuner-orchestratord \
	/usr/lib/systemd/system/simpletuner-orchestratord.service \
	/usr/lib/systemd/system/simpletuner-orchestratord.socket \
	/usr/lib/systemd/system/simpletuner-orchestratord-admin.socket \
	/usr/lib/sysusers.d/simpletuner-orchestratord.conf /usr/lib/tmpfiles.d/simpletuner-orchestratord.conf \
	/etc/simpletuner/orchestratord.toml /etc/simpletuner/configs \
	/usr/share/man/man8/simpletuner-orchestratord.8.gz /usr/share/man/man5/simpletuner-orchestratord.toml.5.gz
check_list simpletuner-workerd /usr/bin/simpletuner-workerd \
	/usr/lib/systemd/system/simpletuner-workerd.service \
	/usr/lib/sysusers.d/simpletuner-workerd.conf /usr/lib/tmpfiles.d/simpletuner-workerd.conf \
	/etc/simpletuner/workerd.toml \
	/usr/share/man/man8/simpletuner-workerd.8.gz /usr/share/man/man5/simpletuner-workerd.toml.5.gz
check_list simpletunerctl /usr/bin/simpletunerctl /usr/share/man/man1/simpletunerctl.1.gz \
	/usr/share/bash-completion/completions/simpletunerctl /usr/share/zsh/vendor-completions/_simpletunerctl \
	/usr/share/fish/vendor_completions.d/simpletunerctl.fish

# Each package ships only its own program. (grep reads dpkg-deb's whole
# listing, no -q: stopping at the first match kills dpkg-deb with a broken
# pipe, which it reports as an error.)
for pair in simpletuner-orchestratord:simpletuner-workerd simpletuner-workerd:simpletuner-orchestratord \
	simpletunerctl:simpletuner-orchestratord simpletunerctl:simpletuner-workerd; do
	pkg=${pair%%:*}
	other=${pair#*:}
	if dpkg-deb -c "$(deb "$pkg")" | grep "usr/bin/$other\$" >/dev/null; then
		echo "$pkg ships /usr/bin/$other" >&2
		exit 1
	fi
done
dpkg-deb -I "$(deb simpletuner-orchestratord)" conffiles | grep -qx /etc/simpletuner/orchestratord.toml
# Files that may hold secrets are never world-readable, not even in the
# archive, before a maintainer script runs.
dpkg-deb -c "$(deb simpletuner-orchestratord)" | grep '^-rw-r----- .* \./etc/simpletuner/orchestratord\.toml$' >/dev/null ||
	{ echo "orchestratord.toml is not 0640 in the .deb" >&2; exit 1; }
dpkg-deb -c "$(deb simpletuner-orchestratord)" | grep '^drwxr-x--- .* \./etc/simpletuner/configs/$' >/dev/null ||
	{ echo "/etc/simpletuner/configs is not 0750 in the .deb" >&2; exit 1; }
dpkg-deb -c "$(deb simpletuner-workerd)" | grep '^-rw------- .* \./etc/simpletuner/workerd\.toml$' >/dev/null ||
	{ echo "workerd.toml is not 0600 in the .deb" >&2; exit 1; }
dpkg-deb -I "$(deb simpletuner-workerd)" conffiles | grep -qx /etc/simpletuner/workerd.toml
if command -v rpm >/dev/null 2>&1; then
	rpm -qcp "$(rpmf simpletuner-orchestratord)" | grep -qx /etc/simpletuner/orchestratord.toml
	rpm -qcp "$(rpmf simpletuner-workerd)" | grep -qx /etc/simpletuner/workerd.toml
	rpm -qlvp "$(rpmf simpletuner-orchestratord)" | grep -q '^-rw-r----- .* /etc/simpletuner/orchestratord\.toml$'
	rpm -qlvp "$(rpmf simpletuner-workerd)" | grep -q '^-rw------- .* /etc/simpletuner/workerd\.toml$'
	rpm -qp --scripts "$(rpmf simpletuner-orchestratord)" | grep -q systemd-sysusers
	rpm -qp --scripts "$(rpmf simpletuner-workerd)" | grep -q systemd-sysusers
else
	echo "rpm not installed; rpm file lists not checked" >&2
fi

# Any lintian warning (or error) fails the gate.
for d in dist/*.deb; do
	lintian --fail-on warning "$d"
done

mkdir -p "$root/var/lib/dpkg/info" "$root/var/lib/dpkg/updates" "$root/etc"
: >"$root/var/lib/dpkg/status"
for f in passwd group shadow gshadow; do : >"$root/etc/$f"; done
dpkgr() { dpkg --root="$root" --force-script-chrootless --force-not-root --force-depends --log=/dev/null "$@"; }

dpkgr -i "$old"/*.deb
grep -q '^simpletuner:' "$root/etc/passwd"
grep -q '^simpletuner-job:' "$root/etc/passwd"
test -d "$root/var/lib/simpletuner"
test -d "$root/var/lib/simpletuner-worker"
# Files that may hold secrets: root's alone, or the orchestrator's group's.
test "$(stat -c %a "$root/etc/simpletuner/workerd.toml")" = 600
test "$(stat -c %a "$root/etc/simpletuner/orchestratord.toml")" = 640
for c in worker-token worker-cert worker-key database-url ldap-bind-password oidc-client-secret; do
	test "$(stat -c %a "$root/etc/simpletuner/$c")" = 600
done
"$root/usr/bin/simpletuner-orchestratord" --check-config --config "$root/etc/simpletuner/orchestratord.toml" >/dev/null
# As shipped, workerd.toml is a template without an orchestrator URL or a
# token: --check-config says so and exits 1.
if "$root/usr/bin/simpletuner-workerd" --check-config --config "$root/etc/simpletuner/workerd.toml" >/dev/null 2>"$old/check.err"; then
	echo "simpletuner-workerd --check-config accepts the packaged template" >&2
	exit 1
fi
grep -q 'key orchestrator.url: not set' "$old/check.err" || { cat "$old/check.err" >&2; exit 1; }
"$root/usr/bin/simpletunerctl" --help >/dev/null
# The binaries report the version of the package they came in.
versions_are() {
	for cmd in "simpletuner-orchestratord --version" "simpletuner-workerd --version" "simpletunerctl version"; do
		got=$("$root/usr/bin/"$cmd)
		[ "$got" = "${cmd%% *} $1" ] || { echo "$cmd from the $1 packages says: $got" >&2; exit 1; }
	done
}
versions_are 0.1.0

# An upgrade keeps an admin's edits to the configuration files.
echo '# edited by the admin' >>"$root/etc/simpletuner/orchestratord.toml"
echo '# edited by the admin' >>"$root/etc/simpletuner/workerd.toml"
dpkgr --force-confold -i dist/*.deb
for c in orchestratord workerd; do
	grep -q '^# edited by the admin$' "$root/etc/simpletuner/$c.toml" || { echo "upgrade lost the edit of $c.toml" >&2; exit 1; }
done
dpkgr -s simpletuner-orchestratord | grep -q '^Version: 0.2.0'
versions_are 0.2.0

# Remove keeps state; purge deletes it.
touch "$root/var/lib/simpletuner/orchestrator.db"
dpkgr -r simpletuner-orchestratord simpletuner-workerd simpletunerctl
test -e "$root/var/lib/simpletuner/orchestrator.db"
test ! -e "$root/usr/bin/simpletuner-orchestratord"
test ! -e "$root/usr/bin/simpletuner-workerd"
dpkgr --purge simpletuner-orchestratord simpletuner-workerd simpletunerctl
test ! -e "$root/var/lib/simpletuner"
test ! -e "$root/var/lib/simpletuner-worker"
test ! -e "$root/etc/simpletuner/orchestratord.toml"

# The units' hardening scores are part of the gate.
go test -count=1 -run 'SecurityScore|UnitsVerify' ./packaging/
echo "packages OK:" dist/*.deb dist/*.rpm
