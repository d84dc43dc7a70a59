#!/bin/sh
# Render the man pages: man/*.[158] are roff sources; this checks them and
# writes man/out/<page>.<section>.gz (reproducible: no name or time in the gzip header).
set -eu
cd "$(dirname "$0")/.."
mkdir -p man/out
for src in man/*.8 man/*.5 man/*.1; do
	if command -v mandoc >/dev/null 2>&1; then
		# -W warning: fail on warnings and errors, not on style notes.
		mandoc -Tlint -W warning "$src"
	elif command -v groff >/dev/null 2>&1; then
		out=$(groff -man -ww -z "$src" 2>&1)
		if [ -n "$out" ]; then echo "$out" >&2; exit 1; fi
	fi
	gzip -9 -n -c "$src" >"man/out/$(basename "$src").gz"
done
ls man/out
