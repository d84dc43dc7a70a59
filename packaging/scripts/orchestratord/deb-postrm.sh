#!/bin/sh
# postrm of simpletuner-orchestratord (deb). Purge deletes its state (the
# SQLite database); the system user stays, so file ownership never dangles.
set -e
root="${DPKG_ROOT:-}"
units="simpletuner-orchestratord.service simpletuner-orchestratord.socket simpletuner-orchestratord-admin.socket"
case "$1" in
purge)
	rm -rf "$root/var/lib/simpletuner" "$root/run/simpletuner"
	rm -f "$root/etc/simpletuner/database-url" "$root/etc/simpletuner/ldap-bind-password" "$root/etc/simpletuner/oidc-client-secret"
	rmdir "$root/etc/simpletuner/configs" "$root/etc/simpletuner" 2>/dev/null || true
	[ -z "$root" ] && deb-systemd-helper purge $units >/dev/null 2>&1 || true
	;;
remove) ;;
*) exit 0 ;;
esac
if [ -z "$root" ] && [ -d /run/systemd/system ]; then
	systemctl --system daemon-reload >/dev/null || true
fi
exit 0
