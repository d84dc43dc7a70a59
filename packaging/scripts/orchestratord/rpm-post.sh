#!/bin/sh
# %post of simpletuner-orchestratord (rpm): 1 install, 2 upgrade. Creates the
# user and directories and reloads systemd; it never enables or starts a unit.
systemd-sysusers simpletuner-orchestratord.conf || :
systemd-tmpfiles --create simpletuner-orchestratord.conf || :
if [ -d /run/systemd/system ]; then
	systemctl daemon-reload || :
	if [ "$1" -ge 2 ]; then systemctl try-restart simpletuner-orchestratord.service || :; fi
fi
