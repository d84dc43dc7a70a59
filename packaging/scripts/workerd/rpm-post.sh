#!/bin/sh
# %post of simpletuner-workerd (rpm): 1 install, 2 upgrade. Creates the user
# and directories and reloads systemd; it never enables or (re)starts a unit.
systemd-sysusers simpletuner-workerd.conf || :
systemd-tmpfiles --create simpletuner-workerd.conf || :
for g in video render; do
	if getent group "$g" >/dev/null; then usermod -a -G "$g" simpletuner-job || :; fi
done
for c in worker-token worker-cert worker-key; do
	[ -e "/etc/simpletuner/$c" ] || (umask 077 && : >"/etc/simpletuner/$c")
done
if [ -d /run/systemd/system ]; then systemctl daemon-reload || :; fi
