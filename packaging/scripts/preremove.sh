#!/bin/sh
# Pre-remove for both formats.
#   deb prerm:  "remove" | "upgrade" new-version | "deconfigure" | "failed-upgrade"
#   rpm %preun: 0 (erase) or 1 (upgrade)
# On removal (not upgrade) stop and disable the services and sockets.
set -e

case "$1" in
remove | 0) ;;
*) exit 0 ;;
esac

if [ -z "${DPKG_ROOT:-}" ] && [ -d /run/systemd/system ]; then
	systemctl --no-reload disable --now \
		simpletuner-workerd.service \
		simpletuner-orchestratord.service \
		simpletuner-orchestratord.socket \
		simpletuner-orchestratord-admin.socket || true
fi
exit 0
