#!/usr/bin/env bash
# The README's demo: an orchestrator on the embedded SQLite store and one
# worker, both real daemons on loopback, running one job of the demo trainer
# (test/demo-trainer) to completion. Needs no GPU and no root (as root, each
# job runs as an unprivileged uid of its own). Everything lives
# in a temporary directory that is removed at the end (DEMO_KEEP=1 keeps it).
set -euo pipefail
cd "$(dirname "$0")/.."
bin=$PWD/bin
[ -x "$bin/simpletuner-orchestratord" ] && [ -x "$bin/simpletuner-workerd" ] && [ -x "$bin/simpletunerctl" ] || make build

dir=$(mktemp -d /tmp/simpletuner-demo.XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  if [ "${DEMO_KEEP:-0}" = 1 ]; then echo "demo files kept in $dir"; else rm -rf "$dir"; fi
}
trap cleanup EXIT
# As root, workerd runs each job as an unprivileged user with a uid of its
# own, and the job must reach its directory and the trainer through $dir.
chmod 711 "$dir"
go build -o "$dir/demo-trainer" ./test/demo-trainer
chmod 755 "$dir/demo-trainer"

# A free loopback port.
port=""
for _ in $(seq 50); do
  p=$((20000 + RANDOM % 20000))
  if ! (exec 3<>/dev/tcp/127.0.0.1/$p) 2>/dev/null; then port=$p; break; fi
done
[ -n "$port" ] || { echo "no free port found" >&2; exit 1; }
api=http://127.0.0.1:$port

cat >"$dir/orchestratord.toml" <<TOML
[server]
listen = ["127.0.0.1:$port"]
admin_socket = "$dir/orchestratord.sock"
[paths]
state_dir = "$dir/state"
configs_dir = "$dir/configs"
[workers]
heartbeat_interval = "2s"
[log]
format = "text"
[metrics]
listen = ""
TOML

step() { printf '\n==> %s\n' "$*"; }
json() { if command -v python3 >/dev/null 2>&1; then python3 -m json.tool; else cat; echo; fi; }

step "starting simpletuner-orchestratord on $api (SQLite in $dir/state)"
"$bin/simpletuner-orchestratord" --config "$dir/orchestratord.toml" >"$dir/orchestratord.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do curl -sf "$api/readyz" >/dev/null && break; sleep 0.1; done
curl -sf "$api/readyz" >/dev/null || { cat "$dir/orchestratord.log"; exit 1; }

step "creating an admin token (simpletuner-orchestratord token create)"
admin=$("$bin/simpletuner-orchestratord" --config "$dir/orchestratord.toml" token create --name demo --scope '*' 2>/dev/null)
auth=(-H "Authorization: Bearer $admin" -H "Content-Type: application/json")
(umask 077; printf '%s\n' "$admin" >"$dir/admin-token")
ctl=("$bin/simpletunerctl" --url "$api" --token-file "$dir/admin-token")

step "creating a worker through the admin API"
created=$(curl -sf "${auth[@]}" -X POST "$api/api/admin/workers" \
  -d '{"name": "demo-worker", "worker_type": "persistent", "labels": {"site": "demo"}}')
worker_id=$(printf '%s' "$created" | sed -E 's/.*"worker_id":"([^"]+)".*/\1/')
printf '%s' "$created" | sed -E 's/"token":"[^"]+"/"token":"(shown once; stored in a file)"/; s/--worker-token [^"]+/--worker-token …/' | json
printf '%s' "$created" | sed -E 's/.*"token":"([^"]+)".*/\1/' >"$dir/worker-token"
chmod 600 "$dir/worker-token"

# The package creates the job user, simpletuner-job; a root run from a
# source tree without it borrows nobody's groups, still one uid per job.
job_user=simpletuner-job
if [ "$(id -u)" = 0 ] && ! id simpletuner-job >/dev/null 2>&1; then
  job_user=nobody
  step "no simpletuner-job user here (the package creates it): jobs run as uids of their own with nobody's groups"
fi

cat >"$dir/workerd.toml" <<TOML
[orchestrator]
url = "$api"
token_file = "$dir/worker-token"
[worker]
name = "demo-worker"
persistent = true
state_dir = "$dir/worker"
[job]
command = ["$dir/demo-trainer"]
user = "$job_user"
cancel_grace = "5s"
[log]
format = "text"
TOML

step "starting simpletuner-workerd (GPUs through NVML; none here is fine)"
"$bin/simpletuner-workerd" --config "$dir/workerd.toml" >"$dir/workerd.log" 2>&1 &
pids+=($!)
idle=""
for _ in $(seq 100); do
  if curl -sf "${auth[@]}" "$api/api/admin/workers/$worker_id" | grep -q '"status":"idle"'; then idle=1; break; fi
  sleep 0.1
done
[ -n "$idle" ] || { echo "the worker did not come online; its log:" >&2; cat "$dir/workerd.log" >&2; exit 1; }

step "submitting a job"
submitted=$(curl -sf "${auth[@]}" -X POST "$api/api/queue/submit" \
  -d '{"config": {"model_type": "lora", "steps": 6, "step_seconds": 0.4}, "target": "worker", "worker_labels": {"site": "demo"}}')
printf '%s' "$submitted" | json
job_id=$(printf '%s' "$submitted" | sed -E 's/.*"job_id":"([^"]+)".*/\1/')

step "following the job's log until it ends (simpletunerctl logs -f $job_id)"
timeout 120 "${ctl[@]}" logs -f "$job_id" 2>&1 | sed 's/^/  /'

step "job summary"
curl -sf "${auth[@]}" "$api/api/queue/$job_id" | json
step "workers"
curl -sf "${auth[@]}" "$api/api/admin/workers" | json

status=$(curl -sf "${auth[@]}" "$api/api/queue/$job_id" | sed -E 's/.*"status":"([a-z]+)".*/\1/')
if [ "$status" = completed ]; then
  step "demo finished: job $job_id completed on $worker_id"
else
  echo "demo failed: job $job_id is $status; logs follow" >&2
  tail -30 "$dir/orchestratord.log" "$dir/workerd.log" >&2
  exit 1
fi
