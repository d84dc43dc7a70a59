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
# The database URL may carry a password: the unit loads it as the credential
# database-url, from a file that exists (LoadCredential= refuses to start
# without it), 0600 root; empty means "not set". The same goes for the LDAP
# service account's password, ldap-bind-password, and the OpenID Connect
# client secret, oidc-client-secret.
for cred in "$root/etc/simpletuner/database-url" "$root/etc/simpletuner/ldap-bind-password" "$root/etc/simpletuner/oidc-client-secret"; do
	[ -e "$cred" ] || (umask 077 && : >"$cred")
done
# orchestratord.toml may hold database.url inline too: root may write it, the
# daemon's group read it, nobody else.
gid=$(awk -F: '$1 == "simpletuner" { print $3 }' "$root/etc/group")
if [ -n "$gid" ] && [ -e "$root/etc/simpletuner/orchestratord.toml" ] && chown "root:$gid" "$root/etc/simpletuner/orchestratord.toml"; then
	chmod 0640 "$root/etc/simpletuner/orchestratord.toml"
fi
# The training configs' directory: the daemon's group reads it, nobody
# else. Only a directory still root's group (as unpacked) is changed, so an
# admin's own choice of group stays.
configs="$root/etc/simpletuner/configs"
if [ -n "$gid" ] && [ -d "$configs" ] && [ "$(stat -c %g "$configs")" = 0 ] && chown "root:$gid" "$configs"; then
	chmod 0750 "$configs"
fi
if [ -z "$root" ] && [ -d /run/systemd/system ]; then
	systemctl --system daemon-reload >/dev/null || true
	# An upgrade restarts a running orchestrator on the new binary.
	if [ -n "$2" ]; then
		deb-systemd-invoke try-restart simpletuner-orchestratord.service >/dev/null || true
	fi
fi
exit 0
