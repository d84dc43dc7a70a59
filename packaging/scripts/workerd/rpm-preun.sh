#!/bin/sh
# %preun of simpletuner-workerd (rpm): on erase (0) stop and disable it.
if [ "$1" -eq 0 ] && [ -d /run/systemd/system ]; then
	systemctl --no-reload disable --now simpletuner-workerd.service || :
fi
