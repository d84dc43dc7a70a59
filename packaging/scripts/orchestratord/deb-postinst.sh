#!/bin/sh
# postinst of simpletuner-orchestratord (deb): "configure" [previous-version].
# Creates the user and directories and reloads systemd; it never enables or
# starts a unit. With DPKG_ROOT set (dpkg --root --force-script-chrootless) it
# works on that root and leaves the running system alone.
set -e
[ "$1" = configure ] || exit 0
root="${DPKG_ROOT:-}"
systemd-sysusers ${root:+--root="$root"} simpletuner-orchestratord.conf
systemd-tmpfiles ${root:+--root="$root"} --create simpletuner-orchestratord.conf
if [ -z "$root" ] && [ -d /run/systemd/system ]; then
	systemctl --system daemon-reload >/dev/null || true
	# An upgrade restarts a running orchestrator on the new binary.
	if [ -n "$2" ]; then
		deb-systemd-invoke try-restart simpletuner-orchestratord.service >/dev/null || true
	fi
fi
exit 0
