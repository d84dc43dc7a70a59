#!/bin/sh
# %post of simpletuner-orchestratord (rpm): 1 install, 2 upgrade. Creates the
# user and directories and reloads systemd; it never enables or starts a unit.
systemd-sysusers simpletuner-orchestratord.conf || :
systemd-tmpfiles --create simpletuner-orchestratord.conf || :
# The database URL may carry a password: the unit loads it as the credential
# database-url, from a file that exists (LoadCredential= refuses to start
# without it), 0600 root; empty means "not set". The same goes for the LDAP
# service account's password, ldap-bind-password, and the OpenID Connect
# client secret, oidc-client-secret.
for cred in /etc/simpletuner/database-url /etc/simpletuner/ldap-bind-password /etc/simpletuner/oidc-client-secret; do
	[ -e "$cred" ] || (umask 077 && : >"$cred")
done
# orchestratord.toml may hold database.url inline too: root may write it, the
# daemon's group read it, nobody else.
gid=$(awk -F: '$1 == "simpletuner" { print $3 }' /etc/group)
if [ -n "$gid" ] && [ -e /etc/simpletuner/orchestratord.toml ] && chown "root:$gid" "/etc/simpletuner/orchestratord.toml"; then
	chmod 0640 "/etc/simpletuner/orchestratord.toml"
fi
# The training configs' directory: the daemon's group reads it, nobody
# else. Only a directory still root's group (as unpacked) is changed, so an
# admin's own choice of group stays.
configs=/etc/simpletuner/configs
if [ -n "$gid" ] && [ -d "$configs" ] && [ "$(stat -c %g "$configs")" = 0 ] && chown "root:$gid" "$configs"; then
	chmod 0750 "$configs"
fi
if [ -d /run/systemd/system ]; then
	systemctl daemon-reload || :
	if [ "$1" -ge 2 ]; then systemctl try-restart simpletuner-orchestratord.service || :; fi
fi
