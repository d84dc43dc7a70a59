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
# LoadCredential=worker-token refuses to start the unit when its source file
# is missing, so one exists; empty means "no token from the credential".
token="$root/etc/simpletuner/worker-token"
[ -e "$token" ] || (umask 077 && : >"$token")
if [ -z "$root" ] && [ -d /run/systemd/system ]; then
	systemctl --system daemon-reload >/dev/null || true
fi
exit 0
