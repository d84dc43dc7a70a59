#!/bin/sh
# Post-install for both formats.
#   deb postinst: "configure" [previously-configured-version]
#   rpm %post:    1 (install) or 2 (upgrade)
# Creates users and directories and reloads systemd; it never enables or starts a
# unit. With DPKG_ROOT set (dpkg --root --force-script-chrootless) it works on that
# root and leaves the running system alone.
set -e

root="${DPKG_ROOT:-}"
upgrade=no
case "$1" in
configure) [ -n "$2" ] && upgrade=yes ;;
2) upgrade=yes ;;
1) ;;
*) exit 0 ;;
esac

has() { # has passwd|group NAME, inside $root when set
	if [ -n "$root" ]; then grep -q "^$2:" "$root/etc/$1" 2>/dev/null; else getent "$1" "$2" >/dev/null; fi
}
r=""
[ -n "$root" ] && r="--root $root"

if command -v systemd-sysusers >/dev/null 2>&1; then
	systemd-sysusers ${root:+--root="$root"} simpletuner.conf
else
	has group simpletuner-admin || groupadd $r --system simpletuner-admin
	has passwd simpletuner || useradd $r --system --user-group --no-create-home \
		--home-dir /var/lib/simpletuner --shell /usr/sbin/nologin --comment "SimpleTuner orchestrator" simpletuner
	usermod $r -a -G simpletuner-admin simpletuner
	has passwd simpletuner-worker || useradd $r --system --user-group --no-create-home \
		--home-dir /var/lib/simpletuner-worker --shell /usr/sbin/nologin --comment "SimpleTuner worker" simpletuner-worker
fi
# GPU device nodes may belong to video (NVIDIA) or render (DRM render nodes).
for g in video render; do
	if has group "$g"; then usermod $r -a -G "$g" simpletuner-worker; fi
done

if command -v systemd-tmpfiles >/dev/null 2>&1; then
	systemd-tmpfiles ${root:+--root="$root"} --create simpletuner.conf
else
	install -d -m 0750 -o simpletuner -g simpletuner "$root/var/lib/simpletuner"
	install -d -m 0750 -o simpletuner-worker -g simpletuner-worker "$root/var/lib/simpletuner-worker"
	install -d -m 0750 -o simpletuner -g simpletuner-admin "$root/run/simpletuner"
fi

# LoadCredential=worker-token: refuses to start the worker when its source file is
# missing, so make sure one exists (empty means "no token from the credential").
token="$root/etc/simpletuner/worker-token"
if [ ! -e "$token" ]; then
	(umask 077 && : >"$token")
fi

if [ -z "$root" ] && [ -d /run/systemd/system ]; then
	systemctl daemon-reload || true
	if [ "$upgrade" = yes ]; then
		# Restart what was running. The worker is left alone: a restart would cancel
		# its training job; it picks up the new binary on its next restart.
		systemctl try-restart simpletuner-orchestratord.service || true
	fi
fi
exit 0
