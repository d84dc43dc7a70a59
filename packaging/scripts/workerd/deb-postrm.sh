#!/bin/sh
# postrm of simpletuner-workerd (deb). Purge deletes its state (job
# directories, spooled reports) and the worker token; the user stays.
set -e
root="${DPKG_ROOT:-}"
case "$1" in
purge)
	rm -rf "$root/var/lib/simpletuner-worker"
	rm -f "$root/etc/simpletuner/worker-token" "$root/etc/simpletuner/worker-cert" "$root/etc/simpletuner/worker-key"
	rmdir "$root/etc/simpletuner" 2>/dev/null || true
	[ -z "$root" ] && deb-systemd-helper purge simpletuner-workerd.service >/dev/null 2>&1 || true
	;;
remove) ;;
*) exit 0 ;;
esac
if [ -z "$root" ] && [ -d /run/systemd/system ]; then
	systemctl --system daemon-reload >/dev/null || true
fi
exit 0
