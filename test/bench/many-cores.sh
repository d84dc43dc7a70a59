#!/usr/bin/env bash
# The orchestrator's scaling measurements for a lent many-core machine that
# has no Go and no C compiler: run from a folder made by `make bench-bundle`.
#
#   test/bench/many-cores.sh BUNDLE OUTDIR
#
# It records the machine (cores, load, the disk's fsync latency), then
#   1. zero-work jobs through 16 real workerd processes (cgroup isolation),
#      the orchestrator at Go's default GOMAXPROCS and at GOMAXPROCS=2;
#   2. job cycles with 50 simulated workers, at both settings;
#   3. both again with the orchestrator inside the bench process, writing
#      CPU, mutex and blocking profiles;
#   4. dispatch latency, heartbeats and RSS with 10,000 idle workers.
# Every result table and profile lands in OUTDIR; the tables go to stdout too.
set -uo pipefail
bundle=$(cd "$1" && pwd)
out=$(mkdir -p "$2" && cd "$2" && pwd)
cd "$bundle"
run() { # run NAME ARGS...: one bench run, its table and log kept under NAME
  local name=$1; shift
  echo "== $name: ./bench $*"
  ./bench -bundle . "$@" >"$out/$name.txt" 2>"$out/$name.log"
  echo "   exit $?"; grep -E '^\|' "$out/$name.txt" | grep -v -- '---' || tail -3 "$out/$name.log"
}

{
  echo "cores $(nproc), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-)"
  echo "load $(cut -d' ' -f1-3 /proc/loadavg), memory $(free -g | awk '/Mem:/{print $2}') GiB"
  echo "fsync: $(dd if=/dev/zero of="$out/.fsync" bs=4k count=300 oflag=dsync 2>&1 | tail -1)"
  rm -f "$out/.fsync"
} | tee "$out/machine.txt"

launch=(-launch-only -launch cgroup -launch-workers 16 -launch-jobs 4000 -launch-samples 200 -workers 0)
cycles=(-store sqlite -workers 0 -gpus=false -launch '' -dashboard=false -jobs 5000)
run launch-default "${launch[@]}"
run launch-procs2 "${launch[@]}" -orch-procs 2
run cycles-default "${cycles[@]}"
run cycles-procs2 "${cycles[@]}" -orch-procs 2
prof() { echo -cpuprofile "$out/$1.cpu" -mutexprofile "$out/$1.mutex" -blockprofile "$out/$1.block"; }
# shellcheck disable=SC2046 # prof prints separate flags
run launch-profile "${launch[@]}" -inprocess $(prof launch)
# shellcheck disable=SC2046
run cycles-profile "${cycles[@]}" -inprocess $(prof cycles)
run fleet -store sqlite -workers 10000 -gpus=false -launch '' -dashboard=false -jobs 1000
