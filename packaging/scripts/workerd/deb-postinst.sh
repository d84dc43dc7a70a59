#!/bin/sh
# postinst of simpletuner-workerd (deb): "configure" [previous-version].
# Creates the user and directories and reloads systemd; it never enables or
# starts a unit, and an upgrade does not restart a running worker (that would
# cancel its training job: it takes the new binary at its next restart).
# With DPKG_ROOT set it works on that root and leaves the running system alone.
set -e
[ "$1" = configure ] || exit 0
root="${DPKG_ROOT:-}"
systemd-sysusers ${root:+--root="$root"} simpletuner-workerd.conf
systemd-tmpfiles ${root:+--root="$root"} --create simpletuner-workerd.conf
# GPU device nodes may belong to video (NVIDIA) or render (DRM render nodes):
# the job user joins those that exist on this machine (not in a DPKG_ROOT).
if [ -z "$root" ]; then
	for g in video render; do
		if getent group "$g" >/dev/null; then usermod -a -G "$g" simpletuner-job; fi
	done
fi
# LoadCredential= refuses to start the unit when a source file is missing, so
# each exists, 0600 root; empty means "not set" (no token, no client
# certificate from the credential).
for c in worker-token worker-cert worker-key; do
	[ -e "$root/etc/simpletuner/$c" ] || (umask 077 && : >"$root/etc/simpletuner/$c")
done
if [ -z "$root" ] && [ -d /run/systemd/system ]; then
	systemctl --system daemon-reload >/dev/null || true
fi
exit 0
