#!/usr/bin/env bash
# A/B of two builds of the daemons on one machine, alternating, from a
# folder made by `make bench-bundle` (the new build, and the bench that
# drives both) and a folder holding the old build's simpletuner-orchestratord
# and simpletuner-workerd:
#
#   test/bench/ab.sh BUNDLE OLD_BIN_DIR OUTDIR [PAIRS]
#
# Each pair runs old then new: zero-work jobs through 16 real workerd
# processes (cgroup isolation), then job cycles with 50 simulated workers.
# (On a machine with Go, make bench-launch-ab BASE=<rev> runs the launch
# part of this in one run, alternating itself.)
# Every table lands in OUTDIR; a one-line summary per run goes to stdout.
set -uo pipefail
bundle=$(cd "$1" && pwd)
old=$(cd "$2" && pwd)
out=$(mkdir -p "$3" && cd "$3" && pwd)
pairs=${4:-2}
cd "$bundle"
summary() { # the figures of one run's table, on one line
  grep -E '^\| (this tree \| cgroup|job cycles|CPU used during the job cycles|submit → job_submit, 50)' "$1" |
    sed -E 's/\| ?/ /g; s/  +/ /g' | tr '\n' ';'
  echo
}
for i in $(seq "$pairs"); do
  for build in old new; do
    bins=()
    [ "$build" = old ] && bins=(-orchestratord-bin "$old/simpletuner-orchestratord" -workerd-bin "$old/simpletuner-workerd")
    ./bench -bundle . "${bins[@]}" -launch-only -launch cgroup -launch-workers 16 -launch-jobs 4000 \
      -launch-samples 200 -workers 0 >"$out/launch-$build-$i.txt" 2>"$out/launch-$build-$i.log"
    echo "launch $build $i: $(summary "$out/launch-$build-$i.txt")"
    ./bench -bundle . "${bins[@]}" -store sqlite -workers 0 -gpus=false -launch '' -dashboard=false \
      -jobs 5000 >"$out/cycles-$build-$i.txt" 2>"$out/cycles-$build-$i.log"
    echo "cycles $build $i: $(summary "$out/cycles-$build-$i.txt")"
  done
done
