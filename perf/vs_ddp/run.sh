#!/usr/bin/env bash
# psrt against torch DDP on network-namespace hosts with shaped links (issue 24).
#
# Usage (as root, from a clone after `make build`):
#   perf/vs_ddp/run.sh BUILD_DIR OUT_DIR [options]
# Options (defaults in brackets):
#   --rates "100mbit 1gbit none"   tc tbf rate of every worker and server host's link, both
#                                  directions; none = unshaped veth                 [100mbit]
#   --models "mlp lenet"           perf/vs_ddp/train.py's models                    [mlp]
#   -n N                           workers, each on its own host                    [4]
#   -s S                           servers                                          [4]
#   --placements "own colocated"   servers on hosts of their own, or on the worker hosts
#                                                                                   [own colocated]
#   --transports "tcp ucx"         psrt's transport (ucx: UCX_TLS=tcp unless set)   [tcp]
#   --steps K --warmup W           timed steps and untimed ones before              [20, 3]
#   --psrun-args "..."             more psrun flags for every psrt run (e.g. --partition-bytes)
#   --variants "V1 V2"             run every psrt case once per variant: "default", or
#                                  NAME=VALUE[,NAME=VALUE] set in the job's processes (psrun
#                                  --env), e.g. "PSRT_SEND_WINDOW=0 default"        [default]
#   --label L                      a name for this set of runs in the JSON and table [default]
#   --no-ddp                       skip the DDP runs (the table then has no ratio to DDP)
#   --no-train                     skip the training runs (DDP and psrt)
#   --pushpull "1 2 4"             also psbench pushpull of one model-sized tensor (the first
#                                  model's bytes) with N workers and each S servers on own hosts,
#                                  --steps rounds; table: round p50 against (M/B)*max(1, N/S)
# Writes OUT_DIR/runs.jsonl (one object per run: s/step, samples/s, bytes through every host's
# link, TCP retransmissions and timeouts, the packets each link's tbf dropped, the command), OUT_DIR/table.md (s/step, samples/s, ratio to DDP of
# the same rate and model, ratio to each one's analytic bound) and OUT_DIR/vs_ddp.png; every run's
# output in OUT_DIR/logs/. Appends to runs.jsonl, so runs with other options add rows.
#
# Hosts (perf/netns_hosts.sh): 0 the launcher (psrun, its scheduler; DDP's rendezvous runs on
# worker host 1), 1..N the workers, N+1..N+S the servers of the "own" placement. Everything runs
# inside tests/multihost/private_net.sh, so the namespaces vanish with it even if killed.
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
if [ -z "${PSRT_PRIVATE_NET:-}" ]; then
  [ "$(id -u)" = 0 ] || { echo "vs_ddp/run.sh: needs root (network namespaces, tc)" >&2; exit 2; }
  case "$(cd "$(dirname "${2:-x}")" 2>/dev/null && pwd)/" in
    /tmp/*) echo "vs_ddp/run.sh: OUT_DIR $2 is under /tmp, which is private to the run's" \
              "namespace (its files would vanish): pick another directory" >&2; exit 2 ;;
  esac
  exec "$repo/tests/multihost/private_net.sh" "$repo/perf/vs_ddp/run.sh" "$@"
fi
if [ -n "${PSRT_PRIVATE_NET_ERROR:-}" ]; then
  echo "vs_ddp/run.sh: cannot make private namespaces: $PSRT_PRIVATE_NET_ERROR" >&2
  exit 2
fi
usage() { sed -n '2,/^set -e/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit "${1:-2}"; }
[ $# -ge 2 ] || usage
build=$(cd "$1" && pwd) || exit 2
out=$2
shift 2
rates=100mbit models=mlp workers=4 servers=4 placements="own colocated" transports=tcp
steps=20 warmup=3 psrun_args="" label=default ddp=1 run_train=1 pushpull="" variants=default
while [ $# -gt 0 ]; do
  case "$1" in
    --rates) rates=$2; shift ;;
    --models) models=$2; shift ;;
    -n) workers=$2; shift ;;
    -s) servers=$2; shift ;;
    --placements) placements=$2; shift ;;
    --transports) transports=$2; shift ;;
    --steps) steps=$2; shift ;;
    --warmup) warmup=$2; shift ;;
    --psrun-args) psrun_args=$2; shift ;;
    --variants) variants=$2; shift ;;
    --label) label=$2; shift ;;
    --no-ddp) ddp=0 ;;
    --no-train) run_train=0 ;;
    --pushpull) pushpull=$2; shift ;;
    -h|--help) usage 0 ;;
    *) echo "vs_ddp/run.sh: unknown option $1" >&2; usage ;;
  esac
  shift
done
for f in "$build/bin/psrun" "$build/python/psrt/_core"*.so; do
  [ -e "$f" ] || { echo "vs_ddp/run.sh: $f is missing: run make build first" >&2; exit 2; }
done
/usr/bin/python3 -c 'import torch' ||
  { echo "vs_ddp/run.sh: /usr/bin/python3 cannot import torch (apt-get install python3-torch)" >&2; exit 2; }
mkdir -p "$out/logs" && out=$(cd "$out" && pwd)
# shellcheck source=perf/netns_hosts.sh  # sets ssh_args (netns_hosts_up)
. "$repo/perf/netns_hosts.sh"
trap 'netns_hosts_down; rm -rf /tmp/psrt-vs-ddp' EXIT
max_s=$servers
for s in $pushpull; do [ "$s" -gt "$max_s" ] && max_s=$s; done
nhosts=$((1 + workers + max_s))
netns_hosts_up "$nhosts" /tmp/psrt-vs-ddp  # /tmp is a private tmpfs here

worker_hosts=$(for ((i = 1; i <= workers; i++)); do printf '%s%s' "${sep:-}" "$(addr "$i")"; sep=,; done)
own_hosts_of() {  # own_hosts_of S: the first S server hosts, comma-separated
  local j sep=""
  for ((j = 1; j <= $1; j++)); do printf '%s%s' "$sep" "$(addr $((workers + j)))"; sep=,; done
}
own_hosts=$(own_hosts_of "$servers")
train=("/usr/bin/python3" "$repo/perf/vs_ddp/train.py" --steps "$steps" --warmup "$warmup")
port=29500
machine="$(uname -r), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"

# measure NAME -- COMMAND...: runs COMMAND (which prints train.py's JSON line), then appends it
# with the link counters of every host to runs.jsonl.
measure() {
  local name=$1 i; shift 2
  local before=() retrans=() rtos=() drops=() log="$out/logs/$name.log"
  for ((i = 1; i < nhosts; i++)); do
    before+=("$(netns_link_bytes "$i")"); retrans+=("$(netns_retrans "$i")")
    rtos+=("$(netns_timeouts "$i")"); drops+=("$(netns_drops "$i")")
  done
  local start rc=0
  start=$(date +%s.%N)
  "$@" > "$log" 2>&1 || rc=$?
  local wall links="" rt=0 rto=0 dropped="" d0 d1 o1 i1
  wall=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
  for ((i = 1; i < nhosts; i++)); do
    links+="${links:+,}\"$(addr "$i")\":$(( $(netns_link_bytes "$i") - ${before[$((i - 1))]} ))"
    rt=$(( rt + $(netns_retrans "$i") - ${retrans[$((i - 1))]} ))
    rto=$(( rto + $(netns_timeouts "$i") - ${rtos[$((i - 1))]} ))
    read -r d0 d1 <<<"${drops[$((i - 1))]}"
    read -r o1 i1 <<<"$(netns_drops "$i")"
    dropped+="${dropped:+,}\"$(addr "$i")\":[$(( o1 - d0 )),$(( i1 - d1 ))]"
  done
  local result
  result=$(grep -o '{"\(engine\|bench\)".*' "$log" | tail -1 || true)
  if [ "$rc" != 0 ] || [ -z "$result" ]; then
    echo "vs_ddp/run.sh: $name failed (exit $rc), see $log:" >&2
    tail -5 "$log" >&2
    result='{"failed": true}'
  fi
  /usr/bin/python3 - "$result" "$name" "$label" "$rate" "$wall" "$rt" "{$links}" "$machine" \
    "$transport" "$placement" "$servers" "$workers" "$rto" "{$dropped}" "${variant:-default}" \
    "$*" >> "$out/runs.jsonl" <<'PY'
import json, sys
r = json.loads(sys.argv[1])
r.update(run=sys.argv[2], set=sys.argv[3], rate=sys.argv[4], wall_s=float(sys.argv[5]),
         tcp_retrans=int(sys.argv[6]), link_bytes=json.loads(sys.argv[7]), machine=sys.argv[8],
         transport=sys.argv[9], placement=sys.argv[10], servers=int(sys.argv[11]),
         workers=int(sys.argv[12]), tcp_timeouts=int(sys.argv[13]),
         tbf_drops=json.loads(sys.argv[14]), variant=sys.argv[15], command=sys.argv[16])
print(json.dumps(r))
PY
  echo "$name: $(tail -1 "$out/runs.jsonl" | cut -c1-160)"
}

ddp_run() {  # the DDP job: one process per worker host, rank 0's host runs the rendezvous
  local model=$1 pids=() i rc=0
  port=$((port + 1))
  for ((i = 1; i <= workers; i++)); do
    ip netns exec "psrt-s$i" env MASTER_ADDR="$(addr 1)" MASTER_PORT="$port" RANK=$((i - 1)) \
      WORLD_SIZE="$workers" GLOO_SOCKET_IFNAME=eth0 OMP_NUM_THREADS=1 \
      timeout 600 "${train[@]}" --engine ddp --model "$model" --label "$label" &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p" || rc=$?; done
  return "$rc"
}

# shellcheck disable=SC2154  # ssh_args comes from netns_hosts_up
psrun_job() {  # psrun_job TRANSPORT SERVERS SERVER_HOSTS COMMAND...: a job on the hosts
  local transport=$1 s=$2 hosts=$3 tls=() envs=() kv
  shift 3
  if [ "${variant:-default}" != default ]; then
    for kv in ${variant//,/ }; do envs+=(--env "$kv"); done
  fi
  [ "$transport" = ucx ] && [ -z "${UCX_TLS:-}" ] && tls=(UCX_TLS=tcp)  # namespaces share /dev/shm: keep UCX on the links
  # shellcheck disable=SC2086  # psrun_args is a list of flags
  ip netns exec psrt-s0 env "${tls[@]}" timeout 600 "$build/bin/psrun" --launcher ssh \
    --ssh-args "$ssh_args" -H "$worker_hosts" --server-hosts "$hosts" --interface 10.9.0.0/24 \
    --bind none --transport "$transport" -n "$workers" -s "$s" "${envs[@]}" $psrun_args -- "$@"
}

psrt_run() {  # psrt_run MODEL TRANSPORT SERVER_HOSTS
  psrun_job "$2" "$servers" "$3" env PYTHONPATH="$build/python" OMP_NUM_THREADS=1 \
    "${train[@]}" --engine psrt --model "$1" --label "$label"
}

model_bytes() {  # the fp32 parameter bytes of train.py's model $1
  PYTHONPATH="$repo/perf/vs_ddp" /usr/bin/python3 -c "import train; m = train.MODELS['$1'](); \
print(sum(p.numel() * 4 for p in m.parameters()))"
}

for rate in $rates; do
  netns_shape "$rate"
  for s in $pushpull; do
    for variant in $variants; do
      transport=${transports%% *} placement=own
      size=$(model_bytes "${models%% *}")
      servers_now=$servers servers=$s
      measure "$label-$rate-pushpull-S$s-${variant//[^A-Za-z0-9_=]/_}" -- psrun_job "$transport" \
        "$s" "$(own_hosts_of "$s")" "$build/bin/psbench" pushpull --size "$size" --iters "$steps" \
        --warmup "$warmup"
      servers=$servers_now
    done
  done
  [ "$run_train" = 1 ] || continue
  for model in $models; do
    if [ "$ddp" = 1 ]; then
      transport=gloo placement=ring variant=default
      measure "$label-$rate-$model-ddp" -- ddp_run "$model"
    fi
    for transport in $transports; do
      for placement in $placements; do
        case "$placement" in
          own) hosts=$own_hosts ;;
          colocated) hosts=$(cut -d, -f1-"$servers" <<<"$worker_hosts") ;;
          *) echo "vs_ddp/run.sh: placement $placement: own or colocated" >&2; exit 2 ;;
        esac
        for variant in $variants; do
          measure "$label-$rate-$model-psrt-$transport-$placement-${variant//[^A-Za-z0-9_=]/_}" -- \
            psrt_run "$model" "$transport" "$hosts"
        done
      done
    done
  done
done
/usr/bin/python3 "$repo/perf/vs_ddp/report.py" "$out/runs.jsonl" --table "$out/table.md" \
  --plot "$out/vs_ddp.png"
cat "$out/table.md"
