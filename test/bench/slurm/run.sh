#!/usr/bin/env bash
# Replay the GPU packing benchmark's seeded job trace through Slurm's backfill
# scheduler on this one machine, and judge the run with the same analyzer the
# simpletuner-orchestratord run is judged with.
#
# What it does, all under one temporary directory:
#   1. writes the trace (`go run ./test/bench -gpu-trace-out`);
#   2. starts a private munged (own key, own socket), a slurmctld and four
#      slurmd processes, one per fake node n1..n4, each node declaring eight
#      GPUs as a counted GRES with no device files;
#   3. submits every job at its submit_s (paced against the wall clock) with
#      `sbatch -N1 --gres=gpu:N`; the submitter notes the time just before
#      each sbatch, and each job notes its own start and end with
#      `date +%s.%N` around `sleep <seconds>` (Slurm's own job times are in
#      whole seconds, too coarse for jobs of 1.5 s);
#   4. waits for every job to end, writes the records (seconds since the
#      first submit) and prints the analyzer's table row;
#   5. stops every daemon it started and removes the cluster's state.
#
# With TEAMS=1 it replays the two-team trace instead (`-gpu-teams`: team
# flood fills the fleet at 0 s, team late submits 6 s later) under
# multifactor priority with fair share: a private MariaDB and slurmdbd hold
# two accounts, flood and late, with a share of 1 each; with PREEMPT=1 (the
# default) the late team's QOS may preempt the flood's (REQUEUE, after
# PreemptExemptTime), a static rule: Slurm has no preemption by fair share.
# Jobs of that trace resume after a requeue from their last checkpoint (every
# CHECKPOINT seconds of their run), as the orchestrator's do. See README.md.
#
# Needs: root, Debian's slurm-wlm and munge packages (the daemons are not
# started by them here: no systemd), jq, Go; with TEAMS=1 also slurmdbd and
# mariadb-server. Nothing system-wide is changed.
#
# Usage:  test/bench/slurm/run.sh             (from anywhere in the repository)
# Env:    BENCH_FLAGS  extra flags for the trace and the analyzer, identical
#                      for both (e.g. "-gpu-jobs 40" for a quick smoke run)
#         TEAMS        1: the two-team trace with fair share (default 0)
#         PREEMPT      with TEAMS=1: 1 (default) lets the late team's QOS
#                      preempt the flood's; 0: no preemption
#         MIN_RUNTIME  with TEAMS=1: PreemptExemptTime in seconds (default 3,
#                      the orchestrator's min_runtime in the bench)
#         CHECKPOINT   with TEAMS=1: seconds between a job's checkpoints
#                      (default 5, as -gpu-teams-checkpoint)
#         REQUEUE_DELAY with TEAMS=1: AuthInfo's cred_expire, which is also
#                      how long a requeued job waits before it may start
#                      again (Slurm's default 120; default here 10)
#         OUT          where records, trace, logs and the row are kept
#                      (default: a new /tmp/slurm-bench-out.XXXXXX)
#         SCHED_PARAMS Slurm's SchedulerParameters (default: see sched_params)
#         LABEL        the scheduler's name in the printed rows
#                      (default slurm-<version>-backfill)
#         PORT_BASE    first of the TCP ports used (default 16800): slurmctld
#                      on +17, the four slurmd on +101..+104; with TEAMS=1
#                      slurmdbd on +19 and MariaDB on +20
set -euo pipefail

cd "$(git -C "$(dirname "$0")" rev-parse --show-toplevel)"
read -r -a bench_flags <<<"${BENCH_FLAGS:-}"
port_base=${PORT_BASE:-16800}
teams=${TEAMS:-0}
preempt=${PREEMPT:-1}
min_runtime=${MIN_RUNTIME:-3}
checkpoint=${CHECKPOINT:-5}
requeue_delay=${REQUEUE_DELAY:-10}
if [ "$teams" = 1 ]; then
	bench_flags+=(-gpu-teams -gpu-teams-checkpoint "$checkpoint")
fi
# Backfill every second at one-second resolution, looking at the whole queue
# (bf_window covers the two-minute job limit); batch_sched_delay=0 lets a
# submit start its job at once where GPUs are free, rather than leaving it
# for up to three seconds to the next pass.
sched_params=${SCHED_PARAMS:-bf_interval=1,bf_resolution=1,bf_continue,bf_window=10,bf_max_job_test=1000,default_queue_depth=1000,batch_sched_delay=0}
nodes=(n1 n2 n3 n4)
gpus_per_node=8

for tool in slurmctld slurmd sbatch squeue sinfo munged jq go; do
	command -v "$tool" >/dev/null || { echo "run.sh: $tool not found (apt-get install -y slurm-wlm munge jq)" >&2; exit 1; }
done
if [ "$teams" = 1 ]; then
	for tool in slurmdbd sacctmgr sacct mariadbd mariadb-install-db; do
		command -v "$tool" >/dev/null || { echo "run.sh: $tool not found (apt-get install -y slurmdbd mariadb-server)" >&2; exit 1; }
	done
fi
[ "$(id -u)" = 0 ] || { echo "run.sh: needs root (slurmd launches jobs as their owner)" >&2; exit 1; }

W=$(mktemp -d /tmp/slurm-bench.XXXXXX)
OUT=${OUT:-$(mktemp -d /tmp/slurm-bench-out.XXXXXX)}
mkdir -p "$OUT" "$W"/{munge,state,spool,log,rec,sub,db}
chmod 755 "$W"
pids=()

teardown() {
	local rc=$?
	# Only the processes started here, by their own pid, newest first.
	for ((i = ${#pids[@]} - 1; i >= 0; i--)); do
		kill "${pids[i]}" 2>/dev/null || true
	done
	for pid in "${pids[@]}"; do
		for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
		kill -9 "$pid" 2>/dev/null || true
	done
	cp -r "$W/log" "$OUT/" 2>/dev/null || true
	rm -rf "$W"
	exit "$rc"
}
trap teardown EXIT
trap 'exit 130' INT TERM

log() { printf '%s run.sh: %s\n' "$(date -u +%T)" "$*" >&2; }

# Wait up to $1 seconds for the command after it to succeed.
wait_for() {
	local limit=$1; shift
	local deadline=$((SECONDS + limit))
	until "$@"; do
		((SECONDS < deadline)) || return 1
		sleep 0.2
	done
}

# The two-team trace's records and row: each job's runs from its own stamps
# (a preempted run ends at its stop), its preemptions counted by its stops;
# Slurm's own counts of requeues for preemption, from the controller's log
# and from sacct, are printed beside them. (No controller-timed row here: a
# requeued job's allocations are not told apart in that log by job id.)
judge_teams() {
	local line id gpus team stops
	for line in "${jobs[@]}"; do
		read -r id _ gpus _ team <<<"$line"
		stops=-
		[ -s "$W/rec/$id.stop" ] && stops=$(paste -sd, "$W/rec/$id.stop")
		printf '%s %s %s %s %s %s %s\n' "$id" "$gpus" "$team" "$(cat "$W/sub/$id")" \
			"$(paste -sd, "$W/rec/$id.start")" "$stops" "$(cat "$W/rec/$id.end")"
	done >"$OUT/raw.txt"
	jq -R -s '
		[split("\n")[] | select(length > 0) | split(" ")
		 | {id: (.[0] | tonumber), gpus: (.[1] | tonumber), team: .[2], submit: (.[3] | tonumber),
		    starts: (.[4] | split(",") | map(tonumber)),
		    stops: (if .[5] == "-" then [] else .[5] | split(",") | map(tonumber) end), end: (.[6] | tonumber)}]
		| if any(.[]; (.starts | length) != (.stops | length) + 1) then error("a job has not one start more than stops") else . end
		| (map(.submit) | min) as $o
		| map({id, gpus, team, submit_s: (.submit - $o), start_s: (.starts[0] - $o), end_s: (.end - $o)}
		      + if (.stops | length) == 0 then {} else
		          {preempted: (.stops | length),
		           runs: [range(0; .starts | length) as $k | {start_s: (.starts[$k] - $o), end_s: ((.stops + [.end])[$k] - $o)}]} end)' \
		"$OUT/raw.txt" >"$OUT/records.json"
	sacct -D -X -n -P -a -o JobID,JobName,Account,State,Start,End -S now-1days >"$OUT/sacct.txt" 2>&1 || true
	local by_log by_sacct by_jobs version label
	by_log=$(grep -c 'preempted JobId=[0-9]* has been requeued' "$W/log/slurmctld.log" || true)
	by_sacct=$(grep -c '|PREEMPTED|' "$OUT/sacct.txt" || true)
	by_jobs=$(jq '[.[].preempted // 0] | add' "$OUT/records.json")
	version=$(sinfo -V | awk '{print $2}')
	label=slurm-$version-fairshare
	[ "$preempt" = 1 ] && label+=-preempt-qos
	label=${LABEL:-$label}
	cp "$OUT/records.json" "$OUT/$label.json"
	{
		echo "load before: $load; machine: $(nproc) cores, $(. /etc/os-release && echo "$PRETTY_NAME")"
		echo "SchedulerParameters=$sched_params"
		grep -E '^(Priority|Preempt|AccountingStorageEnforce|AccountingStorageTRES)' "$W/slurm.conf"
		echo "preemptions: $by_jobs stopped by SIGTERM (the jobs' stamps), $by_log requeued for preemption (slurmctld log), $by_sacct PREEMPTED records (sacct -D)"
	} | tee "$OUT/row.md"
	go run ./test/bench "${bench_flags[@]}" -gpu-analyze "$OUT/$label.json" | tee -a "$OUT/row.md"
	log "records, logs and config kept in $OUT"
}

log "writing the trace"
go run ./test/bench "${bench_flags[@]}" -gpu-trace-out "$OUT/trace.json"
njobs=$(jq length "$OUT/trace.json")

# munge: a fresh key and a socket of our own, so the machine's munge (if any)
# is neither used nor disturbed.
dd if=/dev/urandom of="$W/munge/munge.key" bs=1024 count=1 status=none
chmod 700 "$W/munge"
chmod 400 "$W/munge/munge.key"
munged --foreground --force --socket="$W/munge/munge.sock" --key-file="$W/munge/munge.key" \
	--pid-file="$W/munge/munged.pid" --log-file="$W/log/munged.log" --seed-file="$W/munge/seed" \
	>>"$W/log/munged.log" 2>&1 &
pids+=($!)
wait_for 10 test -S "$W/munge/munge.sock" || { echo "run.sh: munged did not start" >&2; exit 1; }

# The two-team trace's accounting: a throwaway MariaDB (its own directory,
# 127.0.0.1 only, root without a password) and a slurmdbd on it. slurmdbd
# reads slurmdbd.conf from slurm.conf's directory.
start_slurmdbd() {
	mariadb-install-db --no-defaults --datadir="$W/db/data" --user=root --auth-root-authentication-method=normal \
		--skip-test-db >"$W/log/mariadb-install.log" 2>&1
	mariadbd --no-defaults --datadir="$W/db/data" --user=root --bind-address=127.0.0.1 --port=$((port_base + 20)) \
		--socket="$W/db/mysqld.sock" --pid-file="$W/db/mysqld.pid" --log-error="$W/log/mariadb.log" \
		--skip-name-resolve --innodb-buffer-pool-size=64M >>"$W/log/mariadb.log" 2>&1 &
	pids+=($!)
	wait_for 60 test -S "$W/db/mysqld.sock" || { echo "run.sh: mariadbd did not start; see $OUT/log" >&2; exit 1; }
	cat >"$W/slurmdbd.conf" <<EOF
AuthType=auth/munge
AuthInfo=socket=$W/munge/munge.sock
DbdHost=localhost
DbdAddr=127.0.0.1
DbdPort=$((port_base + 19))
SlurmUser=root
LogFile=$W/log/slurmdbd.log
PidFile=$W/slurmdbd.pid
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=$((port_base + 20))
StorageUser=root
StorageLoc=slurm_acct_db
EOF
	chmod 600 "$W/slurmdbd.conf"
	slurmdbd -D >"$W/log/slurmdbd.out" 2>&1 &
	pids+=($!)
	wait_for 60 sacctmgr -n list cluster >/dev/null 2>&1 || { echo "run.sh: slurmdbd did not answer; see $OUT/log" >&2; exit 1; }
}

# Two accounts with a share of 1 each, root a user of both; each account's
# jobs run in a QOS of its name, and with preemption the late team's QOS may
# requeue the flood's jobs.
add_accounts() {
	local s=(sacctmgr -i)
	{
		"${s[@]}" add cluster gpubench
		"${s[@]}" add qos flood,late
		"${s[@]}" modify qos flood,late set preemptmode=requeue
		if [ "$preempt" = 1 ]; then "${s[@]}" modify qos late set preempt=flood; fi
		"${s[@]}" add account flood,late cluster=gpubench fairshare=1
		"${s[@]}" add user root account=flood qos=flood defaultqos=flood fairshare=1
		"${s[@]}" add user root account=late qos=late defaultqos=late fairshare=1
	} >"$W/log/sacctmgr.log" 2>&1
	sacctmgr -n -P show assoc format=account,user,fairshare,qos >&2
	sacctmgr -n -P show qos format=name,preempt,preemptmode >&2
}

# The cluster. Each node declares more CPUs than any mix of its eight GPU
# jobs can use (config_overrides: slurmd takes the config's word over the two
# real cores), and memory is not a consumable (CR_Core), so GPUs are the only
# resource jobs wait for — as in the simpletuner fleet.
: >"$W/plugstack.conf"
# Without teams: no accounting, first come first served. With teams:
# accounting in slurmdbd (GPUs tracked as a TRES, billed at 1 per GPU and
# nothing for CPUs), multifactor priority made of fair share alone, usage
# halving every hour as the orchestrator's in the bench, recomputed every
# minute (PriorityCalcPeriod's least); with PREEMPT=1 preemption by QOS.
if [ "$teams" = 1 ]; then
	accounting="AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
AccountingStoragePort=$((port_base + 19))
AccountingStoragePass=$W/munge/munge.sock
AccountingStorageEnforce=associations,limits,qos
AccountingStorageTRES=gres/gpu"
	priority="PriorityType=priority/multifactor
PriorityWeightFairshare=100000
PriorityWeightAge=0
PriorityWeightJobSize=0
PriorityWeightPartition=0
PriorityWeightQOS=0
PriorityDecayHalfLife=60
PriorityCalcPeriod=1"
	if [ "$preempt" = 1 ]; then
		priority+="
PreemptType=preempt/qos
PreemptMode=REQUEUE
PreemptExemptTime=0:$min_runtime"
	fi
	billing=" TRESBillingWeights=GRES/gpu=1.0"
	# A requeued job may start again cred_expire + 1 s after its requeue:
	# 120 s by default, longer than the trace's jobs; scaled down like the
	# other timers.
	auth_info="socket=$W/munge/munge.sock,cred_expire=$requeue_delay"
else
	accounting="AccountingStorageType=accounting_storage/none"
	priority="PriorityType=priority/basic"
	billing=""
	auth_info="socket=$W/munge/munge.sock"
fi
cat >"$W/slurm.conf" <<EOF
ClusterName=gpubench
SlurmctldHost=localhost
SlurmctldPort=$((port_base + 17))
SlurmdPort=$((port_base + 18))
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=$auth_info
StateSaveLocation=$W/state
SlurmdSpoolDir=$W/spool/%n
SlurmctldPidFile=$W/slurmctld.pid
SlurmdPidFile=$W/slurmd.%n.pid
SlurmctldLogFile=$W/log/slurmctld.log
SlurmdLogFile=$W/log/slurmd.%n.log
SlurmctldDebug=info
SlurmdDebug=info
PlugStackConfig=$W/plugstack.conf
ProctrackType=proctrack/pgid
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
$accounting
JobCompType=jobcomp/none
MpiDefault=none
SwitchType=switch/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
GresTypes=gpu
SchedulerType=sched/backfill
SchedulerParameters=$sched_params
$priority
SlurmdParameters=config_overrides
ReturnToService=2
MinJobAge=3600
KillWait=5
MailProg=/bin/true
InactiveLimit=0
EOF
for i in "${!nodes[@]}"; do
	echo "NodeName=${nodes[i]} NodeHostname=localhost NodeAddr=127.0.0.1 Port=$((port_base + 101 + i)) CPUs=32 RealMemory=64000 Gres=gpu:$gpus_per_node State=UNKNOWN" >>"$W/slurm.conf"
done
# Every job gets the same time limit: backfill plans in whole minutes, the
# trace's jobs run 1.5–60 s, so no per-job limit could tell them apart; and
# the simpletuner scheduler does not know run times either.
echo "PartitionName=gpu Nodes=$(IFS=,; echo "${nodes[*]}") Default=YES DefaultTime=00:02:00 MaxTime=INFINITE State=UP$billing" >>"$W/slurm.conf"
# Slurm 22.05 drops a GPU GRES that names no device file, and wants each file
# to be a device: eight links to /dev/null stand in (all nodes share them;
# with task/none nothing fences devices, so nothing ever opens them).
mkdir -p "$W/dev"
for ((g = 0; g < gpus_per_node; g++)); do ln -s /dev/null "$W/dev/gpu$g"; done
cat >"$W/gres.conf" <<EOF
AutoDetect=off
NodeName=$(IFS=,; echo "${nodes[*]}") Name=gpu File=$W/dev/gpu[0-$((gpus_per_node - 1))]
EOF
cp "$W/slurm.conf" "$W/gres.conf" "$OUT/"
export SLURM_CONF=$W/slurm.conf
if [ "$teams" = 1 ]; then
	start_slurmdbd
	add_accounts
	cp "$W/slurmdbd.conf" "$OUT/"
fi

slurmctld -D -c -f "$SLURM_CONF" >"$W/log/slurmctld.out" 2>&1 &
pids+=($!)
for n in "${nodes[@]}"; do
	mkdir -p "$W/spool/$n"
	slurmd -D -N "$n" -f "$SLURM_CONF" >"$W/log/slurmd.$n.out" 2>&1 &
	pids+=($!)
done
all_idle() { [ "$(sinfo -h -N -o '%N %T' 2>/dev/null | grep -c ' idle$')" = "${#nodes[@]}" ]; }
wait_for 60 all_idle || { echo "run.sh: nodes never became idle:" >&2; sinfo -N >&2 || true; exit 1; }
log "slurm $(sinfo -V | awk '{print $2}'): ${#nodes[@]} nodes × $gpus_per_node GPUs idle"
sinfo -N -o '%N %T %G %c' >&2

# The jobs note their own times: Slurm's are whole seconds.
cat >"$W/job.sh" <<'EOF'
#!/bin/sh
# $1 = trace id, $2 = seconds to hold the GPUs, $3 = record directory
date +%s.%N >"$3/$1.start"
echo "$SLURM_JOB_NODELIST" >"$3/$1.node"
sleep "$2"
date +%s.%N >"$3/$1.end"
EOF
# The two-team trace's job: its runs append to the start file; stopped by
# a preemption (SIGTERM) it notes the stop and the seconds its checkpoints
# kept, from which a requeued run resumes.
cat >"$W/job-teams.sh" <<'EOF'
#!/bin/sh
# $1 = trace id, $2 = seconds to hold the GPUs, $3 = record directory,
# $4 = seconds between checkpoints
start=$(date +%s.%N)
echo "$start" >>"$3/$1.start"
kept=$(cat "$3/$1.kept" 2>/dev/null || echo 0)
trap 'now=$(date +%s.%N); echo "$now" >>"$3/$1.stop"
	awk -v k="$kept" -v s="$start" -v n="$now" -v c="$4" "BEGIN { printf \"%.3f\\n\", k + int((n - s) / c) * c }" >"$3/$1.kept"
	exit 143' TERM
sleep "$(awk -v s="$2" -v k="$kept" 'BEGIN { printf "%.3f", s - k }')" &
wait $!
date +%s.%N >"$3/$1.end"
EOF
chmod 755 "$W/job.sh" "$W/job-teams.sh"

load=$(cut -d' ' -f1-3 /proc/loadavg)
log "load before the replay: $load; replaying $njobs jobs"
mapfile -t jobs < <(jq -r '.[] | "\(.id) \(.submit_s * 1000000 | round) \(.gpus) \(.seconds) \(.team // "")"' "$OUT/trace.json")
sbatch_pids=()
t0=${EPOCHREALTIME/./}
for line in "${jobs[@]}"; do
	read -r id at_us gpus seconds team <<<"$line"
	wait_us=$((t0 + at_us - ${EPOCHREALTIME/./}))
	if ((wait_us > 0)); then sleep "$(printf '%d.%06d' $((wait_us / 1000000)) $((wait_us % 1000000)))"; fi
	echo "$EPOCHREALTIME" >"$W/sub/$id"
	# In the background, so that a slow sbatch does not delay the next
	# submit: the trace's arrivals keep their pace.
	if [ -n "$team" ]; then
		sbatch --parsable -N1 -n1 --gres="gpu:$gpus" -J "t$id" -o /dev/null -e "$W/rec/$id.err" \
			-A "$team" --qos="$team" --requeue "$W/job-teams.sh" "$id" "$seconds" "$W/rec" "$checkpoint" \
			>"$W/sub/$id.jobid" 2>"$W/sub/$id.sberr" &
	else
		sbatch --parsable -N1 -n1 --gres="gpu:$gpus" -J "t$id" -o /dev/null -e "$W/rec/$id.err" \
			"$W/job.sh" "$id" "$seconds" "$W/rec" >"$W/sub/$id.jobid" 2>"$W/sub/$id.sberr" &
	fi
	sbatch_pids+=($!)
done
wait "${sbatch_pids[@]}" || true # failures are reported below, per job
for line in "${jobs[@]}"; do
	read -r id _ <<<"$line"
	[ -s "$W/sub/$id.jobid" ] || { echo "run.sh: sbatch of trace job $id failed: $(cat "$W/sub/$id.sberr")" >&2; exit 1; }
done
log "all submitted in $(((${EPOCHREALTIME/./} - t0) / 1000)) ms; waiting for them to end"

all_ended() { [ "$(find "$W/rec" -name '*.end' | wc -l)" -ge "$njobs" ]; }
queue_empty() { [ -z "$(squeue -h -o %i)" ]; }
until all_ended; do
	if queue_empty && ! all_ended; then
		sleep 1 # a job's last write may trail its exit
		all_ended && break
		echo "run.sh: the queue is empty but not every job noted its end; see $OUT/log" >&2
		exit 1
	fi
	sleep 0.5
done
wait_for 30 queue_empty || { echo "run.sh: jobs still in the queue after all ended" >&2; exit 1; }
log "all ended"
scontrol show job -o >"$OUT/scontrol-jobs.txt" # Slurm's own whole-second view, for reference
if [ "$teams" = 1 ]; then
	judge_teams
	exit 0
fi

# records.json: [{id, gpus, submit_s, start_s, end_s}] relative to the first submit.
for line in "${jobs[@]}"; do
	read -r id _ gpus _ <<<"$line"
	printf '%s %s %s %s %s %s\n' "$id" "$gpus" "$(cat "$W/sub/$id")" "$(cat "$W/rec/$id.start")" "$(cat "$W/rec/$id.end")" "$(cat "$W/rec/$id.node")"
done >"$OUT/raw.txt"
jq -R -s '
	[split("\n")[] | select(length > 0) | split(" ")
	 | {id: (.[0] | tonumber), gpus: (.[1] | tonumber), submit: (.[2] | tonumber), start: (.[3] | tonumber), end: (.[4] | tonumber)}]
	| (map(.submit) | min) as $o
	| map({id, gpus, submit_s: (.submit - $o), start_s: (.start - $o), end_s: (.end - $o)})' \
	"$OUT/raw.txt" >"$OUT/records.json"

# records-slurmctld.json: the controller's own view, from its log (millisecond
# stamps): submit = the submit RPC, start = the allocation, end = the job's
# completion. These are the moments simpletuner-orchestratord records for its
# own jobs (queued, dispatched, ended), so this row leaves out sbatch's round
# trip and slurmd's launch, which the jobs' own stamps include.
for line in "${jobs[@]}"; do
	read -r id _ gpus _ <<<"$line"
	echo "$(cat "$W/sub/$id.jobid") $id $gpus"
done >"$OUT/jobids.txt"
jq -R -n --rawfile ids "$OUT/jobids.txt" '
	($ids | split("\n") | map(select(length > 0) | split(" ") | {key: .[0], value: {id: (.[1] | tonumber), gpus: (.[2] | tonumber)}}) | from_entries) as $trace
	| [inputs | capture("^\\[(?<ts>[^.\\]]+)\\.(?<ms>[0-9]+)\\] (?<msg>.*)$")?
	   | ((.ts + "Z" | fromdateiso8601) + (.ms | tonumber) / 1000) as $t
	   | (.msg | capture("_slurm_rpc_submit_batch_job: JobId=(?<j>[0-9]+) ")? | {j, k: "submit", $t}),
	     (.msg | capture("(sched: Allocate|_start_job: Started) JobId=(?<j>[0-9]+) ")? | {j, k: "start", $t}),
	     (.msg | capture("_job_complete: JobId=(?<j>[0-9]+) done")? | {j, k: "end", $t})]
	| group_by(.j) | map({key: .[0].j, value: (map({key: .k, value: .t}) | from_entries)}) | from_entries as $ev
	| ($trace | keys | map($ev[.].submit) | min) as $o
	| [$trace | to_entries[] | .value + {submit_s: ($ev[.key].submit - $o), start_s: ($ev[.key].start - $o), end_s: ($ev[.key].end - $o)}]
	| sort_by(.id)' "$W/log/slurmctld.log" >"$OUT/records-slurmctld.json"
if [ "$(jq '[.[] | select(.start_s == null or .end_s == null or .submit_s == null)] | length' "$OUT/records-slurmctld.json")" != 0 ]; then
	echo "run.sh: the slurmctld log lacks a submit, start or end of some job" >&2
	exit 1
fi

# The analyzer names the row after the file.
version=$(sinfo -V | awk '{print $2}')
label=${LABEL:-slurm-$version-backfill}
cp "$OUT/records.json" "$OUT/$label.json"
cp "$OUT/records-slurmctld.json" "$OUT/$label-ctld-times.json"
{
	echo "load before: $load; machine: $(nproc) cores, $(. /etc/os-release && echo "$PRETTY_NAME")"
	echo "SchedulerParameters=$sched_params"
} | tee "$OUT/row.md"
go run ./test/bench "${bench_flags[@]}" -gpu-analyze "$OUT/$label.json" | tee -a "$OUT/row.md"
go run ./test/bench "${bench_flags[@]}" -gpu-analyze "$OUT/$label-ctld-times.json" | grep -F "| $label-ctld-times |" | tee -a "$OUT/row.md"
log "records, logs and config kept in $OUT"
