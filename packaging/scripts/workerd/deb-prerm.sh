#!/bin/sh
# prerm of simpletuner-workerd (deb): on removal (not upgrade) stop it.
set -e
[ "$1" = remove ] || exit 0
if [ -z "${DPKG_ROOT:-}" ] && [ -d /run/systemd/system ]; then
	deb-systemd-invoke stop simpletuner-workerd.service >/dev/null || true
fi
exit 0
