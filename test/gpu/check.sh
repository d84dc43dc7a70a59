#!/usr/bin/env bash
# make gpu-check: the daemons on a real NVIDIA GPU, as a user runs them.
# simpletuner-orchestratord (embedded SQLite) and simpletuner-workerd (GPUs
# through NVML, each job in its own cgroup and uid as root) on loopback, a
# small PyTorch trainer (test/gpu/train.py) submitted the documented way,
# without gpu_count. It checks that
#   1. workerd's NVML inventory matches nvidia-smi's;
#   2. the job sees exactly its GPUs (the whole worker) and trains;
#   3. a cancel frees the GPU's memory within 3 s;
#   4. kill -9 of workerd frees it within 1 s, and the job is retried;
#   5. a process left on the GPU after a job holds the GPU back (no job gets
#      it) until it is gone;
#   6. nothing is left on the GPU at the end.
# On a machine without an NVIDIA GPU (or without PyTorch with CUDA) it says
# so in one line and exits 0. It needs no network and no Go where bin/ holds
# the daemons already (BIN=dir to use others).
set -euo pipefail
cd "$(dirname "$0")/../.."

skip() { echo "gpu-check: skipped: $*"; exit 0; }
command -v nvidia-smi >/dev/null 2>&1 || skip "no NVIDIA GPU here (nvidia-smi not found)"
ngpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)
[ "${ngpus:-0}" -gt 0 ] || skip "no NVIDIA GPU here (nvidia-smi lists none)"
python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null ||
  skip "python3 has no PyTorch with CUDA"

bin=${BIN:-$PWD/bin}
if ! [ -x "$bin/simpletuner-orchestratord" ] || ! [ -x "$bin/simpletuner-workerd" ] || ! [ -x "$bin/simpletunerctl" ]; then
  make build >/dev/null
fi

dir=$(mktemp -d /tmp/simpletuner-gpu-check.XXXXXX)
chmod 711 "$dir"
pids=()
foreign=""
cleanup() {
  [ -n "$foreign" ] && kill "$foreign" 2>/dev/null || true
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  if [ "${GPU_CHECK_KEEP:-0}" = 1 ]; then echo "gpu-check: files kept in $dir"; else rm -rf "$dir"; fi
}
trap cleanup EXIT
install -m 755 test/gpu/train.py "$dir/train.py"

failures=0
ok() { printf 'ok    %s\n' "$*"; }
fail() { printf 'FAIL  %s\n' "$*"; failures=$((failures + 1)); }
now() { echo "$EPOCHREALTIME"; }
since() { python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.2f}')" "$1" "$(now)"; }
field() { python3 -c 'import json,sys; v=json.load(sys.stdin)
for k in sys.argv[1].split("."): v = v[int(k)] if isinstance(v, list) else v.get(k)
print("" if v is None else (json.dumps(v) if isinstance(v, (dict, list)) else v))' "$1"; }
gpu_apps() { nvidia-smi --query-compute-apps=pid --format=csv,noheader 2>/dev/null | grep -c . || true; }
# wait_for SECONDS DESCRIPTION COMMAND...: poll COMMAND every 50 ms.
wait_for() {
  local limit=$1 what=$2; shift 2
  local until=$(( $(date +%s) + limit ))
  while ! "$@"; do
    [ "$(date +%s)" -lt "$until" ] || { echo "gpu-check: timed out after ${limit}s waiting for $what" >&2; return 1; }
    sleep 0.05
  done
}

port=""
for _ in $(seq 50); do
  p=$((20000 + RANDOM % 20000))
  if ! (exec 3<>/dev/tcp/127.0.0.1/$p) 2>/dev/null; then port=$p; break; fi
done
[ -n "$port" ] || { echo "gpu-check: no free port" >&2; exit 1; }
api=http://127.0.0.1:$port
cat >"$dir/orchestratord.toml" <<TOML
[server]
listen = ["127.0.0.1:$port"]
admin_socket = ""
[paths]
state_dir = "$dir/state"
configs_dir = "$dir/configs"
[workers]
heartbeat_interval = "2s"
heartbeat_timeout = "10s"
health_check_interval = "1s"
startup_grace = "1s"
[jobs]
cancel_grace = "10s"
[log]
format = "text"
[metrics]
listen = ""
TOML
"$bin/simpletuner-orchestratord" --config "$dir/orchestratord.toml" >"$dir/orchestratord.log" 2>&1 &
pids+=($!)
wait_for 20 "the orchestrator" curl -sf "$api/readyz" -o /dev/null
admin=$("$bin/simpletuner-orchestratord" --config "$dir/orchestratord.toml" token create --name gpu-check --scope '*' 2>/dev/null)
(umask 077; printf '%s\n' "$admin" >"$dir/admin-token")
ctl=("$bin/simpletunerctl" --url "$api" --token-file "$dir/admin-token")
call() { curl -sf -H "Authorization: Bearer $admin" -H "Content-Type: application/json" "$@"; }

"${ctl[@]}" worker create gpu-check --persistent --credential "$dir/worker-token" >/dev/null
worker_id=$(call "$api/api/admin/workers" | field workers.0.worker_id)
job_user=simpletuner-job
id simpletuner-job >/dev/null 2>&1 || job_user=nobody
cat >"$dir/workerd.toml" <<TOML
[orchestrator]
url = "$api"
token_file = "$dir/worker-token"
[worker]
name = "gpu-check"
state_dir = "$dir/worker"
[job]
command = ["python3", "$dir/train.py"]
user = "$job_user"
[gpu]
backend = "nvml"
watch_interval = "1s"
[log]
format = "text"
TOML
start_workerd() {
  "$bin/simpletuner-workerd" --config "$dir/workerd.toml" >>"$dir/workerd.log" 2>&1 &
  workerd=$!
  pids+=($workerd)
}
worker_idle() { call "$api/api/admin/workers/$worker_id" | grep -q '"status":"idle"'; }
start_workerd
wait_for 60 "the worker to come online" worker_idle

# 1. The inventory.
seen=$("$bin/simpletuner-workerd" --detect-gpus 2>/dev/null | field count)
reported=$(call "$api/api/admin/workers/$worker_id" | field gpu_count)
uuids=$(nvidia-smi --query-gpu=uuid --format=csv,noheader | paste -sd, -)
if [ "$seen" = "$ngpus" ] && [ "$reported" = "$ngpus" ]; then
  ok "inventory: $ngpus GPU(s) through NVML ($(nvidia-smi --query-gpu=name --format=csv,noheader | sort -u | paste -sd, -)), isolation $(call "$api/api/admin/workers/$worker_id" | field capabilities.isolation)"
else
  fail "inventory: nvidia-smi lists $ngpus GPU(s), workerd --detect-gpus $seen, the worker reported $reported"
fi

submit() { call -X POST "$api/api/queue/submit" -d "$1"; }
status_of() { call "$api/api/queue/$1" | field status; }
is_status() { [ "$(status_of "$1")" = "$2" ]; }
log_has() { "${ctl[@]}" logs "$1" 2>/dev/null | grep -q -- "$2"; }
gpu_busy() { [ "$(gpu_apps)" -gt 0 ]; }
gpu_clear() { [ "$(gpu_apps)" -eq 0 ]; }

# 2. The documented submit: no gpu_count.
reply=$(submit '{"config": {"model_type": "lora", "steps": 300}, "target": "worker"}')
job=$(printf '%s' "$reply" | field job_id)
alloc=$(printf '%s' "$reply" | field gpu_allocation)
wait_for 300 "the training job" is_status "$job" completed || true
log=$("${ctl[@]}" logs "$job" 2>/dev/null || true)
want="gpu-check: visible=$uuids devices=$ngpus"
if [ "$alloc" = "whole worker" ] && printf '%s' "$log" | grep -qF -- "$want" && printf '%s' "$log" | grep -q '^trained: ' &&
  [ "$(status_of "$job")" = completed ]; then
  att=$(call "$api/api/queue/$job" | field attempts.0)
  ok "submit without gpu_count: $alloc; the job saw $ngpus GPU(s) ($uuids) and trained ($(printf '%s' "$log" | grep '^trained: ' | sed 's/^trained: //')); $(printf '%s' "$att" | field gpu_seconds) GPU-seconds, $(printf '%s' "$att" | field gpu_utilization_pct) % mean utilisation, peak GPU memory $(printf '%s' "$att" | field peak_gpu_memory_bytes) bytes"
else
  fail "submit without gpu_count: allocation '$alloc', status $(status_of "$job"); want '$want' and a falling loss in the log:"
  printf '%s\n' "$log" | head -20 | sed 's/^/      /'
fi

# 3. A cancel frees the GPU within 3 s.
job=$(submit '{"config": {"mode": "hold", "hold_mib": 1024}}' | field job_id)
wait_for 120 "the job holding GPU memory" log_has "$job" "^holding"
wait_for 10 "the job on the GPU" gpu_busy
t0=$(now)
"${ctl[@]}" cancel "$job" >/dev/null
wait_for 30 "the GPU to be free after the cancel" gpu_clear || true
took=$(since "$t0")
wait_for 30 "the job cancelled" is_status "$job" cancelled || true
if python3 -c "import sys; sys.exit(0 if float(sys.argv[1]) <= 3 else 1)" "$took" && [ "$(status_of "$job")" = cancelled ] && log_has "$job" "checkpoint saved"; then
  ok "cancel: no process on the GPU ${took}s after the cancel (limit 3 s); the trainer got SIGTERM and saved a checkpoint"
else
  fail "cancel: GPU free after ${took}s (limit 3 s), job $(status_of "$job")"
fi

# 4. kill -9 of workerd frees the GPU within 1 s; the job is retried.
job=$(submit '{"config": {"mode": "hold", "hold_mib": 1024}}' | field job_id)
wait_for 120 "the job holding GPU memory" log_has "$job" "^holding"
wait_for 10 "the job on the GPU" gpu_busy
t0=$(now)
kill -9 "$workerd"
wait_for 30 "the GPU to be free after kill -9" gpu_clear || true
took=$(since "$t0")
start_workerd
retried() { [ "$(call "$api/api/queue/$job" | field attempt)" -ge 2 ] && is_status "$job" running; }
wait_for 120 "the job retried" retried || true
attempts=$(call "$api/api/queue/$job" | field attempt)
if python3 -c "import sys; sys.exit(0 if float(sys.argv[1]) <= 1 else 1)" "$took" && [ "${attempts:-0}" -ge 2 ]; then
  ok "kill -9 of workerd: no process on the GPU ${took}s later (limit 1 s); the job runs again as attempt $attempts"
else
  fail "kill -9 of workerd: GPU free after ${took}s (limit 1 s), job at attempt ${attempts:-?} ($(status_of "$job"))"
fi
"${ctl[@]}" cancel "$job" >/dev/null || true
wait_for 60 "the retried job cancelled" is_status "$job" cancelled || true
wait_for 30 "the GPU free" gpu_clear || true

# 5. A process left on the GPU holds it back until it is gone.
python3 -c 'import time, torch
t = torch.empty(1 << 30, dtype=torch.uint8, device="cuda"); t.fill_(1); torch.cuda.synchronize()
print("ready", flush=True); time.sleep(900)' >"$dir/foreign.log" 2>&1 &
foreign=$!
foreign_ready() { grep -q ready "$dir/foreign.log"; }
wait_for 60 "the foreign process on the GPU" foreign_ready
job=$(submit '{"config": {"steps": 50}}' | field job_id)
wait_for 300 "the short job" is_status "$job" completed || true
held() { call "$api/api/admin/workers/$worker_id" | field gpu_conditions | grep -q '"held"'; }
wait_for 30 "the GPU held back" held || true
reason=$(call "$api/api/admin/workers/$worker_id" | field gpu_conditions.0.reason)
next=$(submit '{"config": {"steps": 50}}' | field job_id)
sleep 5
waiting=$(status_of "$next")
kill "$foreign"; wait "$foreign" 2>/dev/null || true; foreign=""
t0=$(now)
released() { ! held; }
wait_for 60 "the GPU released" released || true
rel=$(since "$t0")
wait_for 300 "the next job" is_status "$next" completed || true
if [[ "$reason" == *"pid "* ]] && [ "$waiting" = queued ] && [ "$(status_of "$next")" = completed ]; then
  ok "hygiene: a process left on the GPU held it back (\"$reason\"); the next job waited, the GPU came back ${rel}s after the process ended"
else
  fail "hygiene: hold reason '$reason', next job was '$waiting' while the GPU was dirty and is $(status_of "$next") now"
fi

# 6. Nothing is left.
wait_for 30 "the GPU empty" gpu_clear || true
if [ "$(gpu_apps)" -eq 0 ]; then
  ok "end: no process left on the GPU"
else
  fail "end: processes left on the GPU:"; nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv | sed 's/^/      /'
fi

if [ "$failures" -gt 0 ]; then
  echo "gpu-check: $failures check(s) failed; logs in $dir (kept)"
  GPU_CHECK_KEEP=1
  exit 1
fi
echo "gpu-check: all checks passed on $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1)"
