#!/bin/sh
# %preun of simpletuner-orchestratord (rpm): on erase (0) stop and disable it.
if [ "$1" -eq 0 ] && [ -d /run/systemd/system ]; then
	systemctl --no-reload disable --now simpletuner-orchestratord.service simpletuner-orchestratord.socket \
		simpletuner-orchestratord-admin.socket || :
fi
