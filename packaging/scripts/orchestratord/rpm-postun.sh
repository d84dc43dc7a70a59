#!/bin/sh
# %postun of simpletuner-orchestratord (rpm). State stays (rpm has no purge).
if [ -d /run/systemd/system ]; then systemctl daemon-reload || :; fi
