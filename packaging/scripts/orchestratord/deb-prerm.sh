#!/bin/sh
# prerm of simpletuner-orchestratord (deb): on removal (not upgrade) stop it.
set -e
[ "$1" = remove ] || exit 0
if [ -z "${DPKG_ROOT:-}" ] && [ -d /run/systemd/system ]; then
	deb-systemd-invoke stop simpletuner-orchestratord.service simpletuner-orchestratord.socket \
		simpletuner-orchestratord-admin.socket >/dev/null || true
fi
exit 0
