#!/bin/sh
# Post-remove for both formats.
#   deb postrm:   "remove" | "purge" | "upgrade" | "abort-*" | "disappear"
#   rpm %postun:  0 (erase) or 1 (upgrade)
# Purge (deb only) deletes state: the SQLite database, job directories, the worker
# token. The system users stay, as Debian policy asks, so file ownership never dangles.
set -e

root="${DPKG_ROOT:-}"
case "$1" in
purge)
	rm -rf "$root/var/lib/simpletuner" "$root/var/lib/simpletuner-worker" "$root/run/simpletuner"
	rm -f "$root/etc/simpletuner/worker-token"
	rmdir "$root/etc/simpletuner/configs" "$root/etc/simpletuner" 2>/dev/null || true
	;;
remove | 0) ;;
*) exit 0 ;;
esac

if [ -z "$root" ] && [ -d /run/systemd/system ]; then
	systemctl daemon-reload || true
fi
exit 0
