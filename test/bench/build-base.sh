#!/usr/bin/env bash
# Build an older revision's daemons for the launch A/B (make bench,
# make bench-launch-ab):
#
#   test/bench/build-base.sh REV OUT_DIR
#
# REV is any git revision of this repository (a commit, a tag); OUT_DIR gets
# its simpletuner-orchestratord and simpletuner-workerd, built by that
# revision's own `make build` in a temporary `git worktree` (no network where
# the module cache already holds its modules). A folder already built from
# the same commit is kept.
set -euo pipefail
rev=$1
out=$2
commit=$(git rev-parse --verify --quiet "$rev^{commit}") || { echo "build-base.sh: $rev is not a commit of this repository" >&2; exit 2; }
mkdir -p "$out"
out=$(cd "$out" && pwd)
if [ "$(cat "$out/COMMIT" 2>/dev/null)" = "$commit" ] &&
  [ -x "$out/simpletuner-orchestratord" ] && [ -x "$out/simpletuner-workerd" ]; then
  echo "build-base.sh: $out already holds $rev ($commit)"
  exit 0
fi
src=$(mktemp -d "${TMPDIR:-/tmp}/simpletuner-base-XXXXXX")
trap 'git worktree remove --force "$src" >/dev/null 2>&1 || rm -rf "$src"' EXIT
git worktree add --detach "$src" "$commit" >/dev/null
echo "build-base.sh: building $rev ($commit) into $out"
rm -f "$out/COMMIT"
make -C "$src" build BIN="$out"
echo "$commit" >"$out/COMMIT"
