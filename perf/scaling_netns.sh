#!/usr/bin/env bash
# The parameter server's scaling experiment on network-namespace hosts (issue 15, part 2):
# N workers and S servers, each on its own host, every host's link shaped with tc tbf to RATE
# (both directions), one model-sized tensor pushed and pulled in SLICE-byte slices; psbench suite
# measures the time per round for every S in SERVERS against the bound (M/B)*max(1, N/S).
#
# Usage (as root, from the repository root):
#   perf/scaling_netns.sh [BIN_DIR] [OUT_DIR]        (defaults: build/bin, build/scaling-netns)
# Environment: RATE (tc rate, default 1gbit), LINK_GBPS (the same in Gbit/s, default 1), MODEL
# (bytes, K/M/G, default 64M), SLICE (--partition-bytes, default 4194304), WORKERS (4), SERVERS
# ("1 2 4"), ITERS (5), WARMUP (1), TRANSPORTS (tcp).
# Writes OUT_DIR/scaling-S<s>.json per S, OUT_DIR/scaling.txt (the tables), OUT_DIR/traffic.txt
# (the anchor, bytes per host link and CPU use per S), OUT_DIR/links-S<s>.txt (every 100 ms:
# time, then bytes into and out of the first worker's and the first server's host), and
# OUT_DIR/scaling-{bandwidth,scaling}.png.
#
# Everything runs inside tests/multihost/private_net.sh (throwaway network, mount and PID
# namespaces): the bridge, the hosts, their sshds and keys vanish with it even if this script is
# killed; the trap also stops them and deletes the namespaces on the way out.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
if [ -z "${PSRT_PRIVATE_NET:-}" ]; then
  [ "$(id -u)" = 0 ] || { echo "scaling_netns.sh: needs root (network namespaces, tc)" >&2; exit 2; }
  exec "$repo/tests/multihost/private_net.sh" "$repo/perf/scaling_netns.sh" "$@"
fi
if [ -n "${PSRT_PRIVATE_NET_ERROR:-}" ]; then
  echo "scaling_netns.sh: cannot make private namespaces: $PSRT_PRIVATE_NET_ERROR" >&2
  exit 2
fi
bin=$(cd "${1:-build/bin}" && pwd)
out=${2:-build/scaling-netns}
mkdir -p "$out" && out=$(cd "$out" && pwd)
rate=${RATE:-1gbit} link=${LINK_GBPS:-1} model=${MODEL:-64M} slice=${SLICE:-4194304}
workers=${WORKERS:-4} servers=${SERVERS:-"1 2 4"} iters=${ITERS:-5} warmup=${WARMUP:-1}
transports=${TRANSPORTS:-tcp}
for tool in ip tc sshd ssh ssh-keygen; do
  command -v "$tool" >/dev/null || [ -x "/usr/sbin/$tool" ] ||
    { echo "scaling_netns.sh: $tool is missing (iproute2, openssh-server)" >&2; exit 2; }
done
max_s=0
for s in $servers; do [ "$s" -gt "$max_s" ] && max_s=$s; done

work=/tmp/psrt-scaling   # a private tmpfs here
# shellcheck source=perf/netns_hosts.sh
. "$repo/perf/netns_hosts.sh"
cleanup() {
  netns_hosts_down
  rm -rf "$work"
}
trap cleanup EXIT

# Host i (0..): h0 the launcher (psrun and its scheduler, unshaped), 1..WORKERS the workers,
# then the servers; every link but h0's shaped both ways.
nhosts=$((1 + workers + max_s))
netns_hosts_up "$nhosts" "$work" || exit 1
netns_shape "$rate"
worker_hosts=$(for ((i = 1; i <= workers; i++)); do printf '%s%s' "${sep:-}" "$(addr "$i")"; sep=,; done)

{
  echo "# $(date -u '+%Y-%m-%d %H:%M UTC'), $(uname -r), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "# links: tc tbf rate $rate burst 256kb latency 50ms, both directions of every worker and server host"
} > "$out/traffic.txt"
: > "$out/scaling.txt"
# The anchor: what TCP gets through one shaped link, one way and both ways at once (psbench
# transport bw, 4 MiB messages, worker host 1 <-> server host 1), in MiB/s.
w1=$(addr 1) s1=$(addr $((workers + 1)))
anchor() {  # anchor FROM_HOST_INDEX TO_ADDRESS PORT: a client in host FROM against a peer at TO
  ip netns exec "psrt-s$1" "$bin/psbench" transport --transport tcp --mode bw --size 4194304 \
    --iters 40 --warmup 5 --connect "$2:$3"
}
peer() {  # peer HOST_INDEX ADDRESS PORT: a passive side listening there
  ip netns exec "psrt-s$1" "$bin/psbench" transport --transport tcp --size 4194304 --listen "$2:$3" \
    > "$work/peer-$3.txt" &
  for _ in $(seq 50); do grep -q LISTENING "$work/peer-$3.txt" 2>/dev/null && return; sleep 0.1; done
  echo "scaling_netns.sh: the psbench transport peer on $2:$3 did not start" >&2; exit 1
}
peer $((workers + 1)) "$s1" 7001
echo "anchor one way    $w1 -> $s1: $(anchor 1 "$s1" 7001)" >> "$out/traffic.txt"
peer $((workers + 1)) "$s1" 7002; peer 1 "$w1" 7003
anchor 1 "$s1" 7002 > "$work/up.txt" & up=$!
anchor $((workers + 1)) "$w1" 7003 > "$work/down.txt"
wait "$up"
echo "anchor both ways  $w1 -> $s1: $(cat "$work/up.txt")" >> "$out/traffic.txt"
echo "anchor both ways  $s1 -> $w1: $(cat "$work/down.txt")" >> "$out/traffic.txt"
wait
# ucx_perftest tag_bw (UCX_TLS=tcp, 4 MiB) over the same link, where ucx-utils is installed.
if command -v ucx_perftest >/dev/null; then
  ip netns exec "psrt-s$((workers + 1))" env UCX_TLS=tcp ucx_perftest -p 7010 >/dev/null 2>&1 &
  perftest=""
  for _ in $(seq 50); do
    perftest=$(ip netns exec psrt-s1 env UCX_TLS=tcp timeout 120 ucx_perftest "$s1" -p 7010 \
      -t tag_bw -s 4194304 -n 100 -w 10 2>/dev/null | grep '^Final:') && break
    sleep 0.1
  done
  wait
  # Final: iters typical avg overall-latency avg-bw overall-bw (MB/s = 2^20 B/s) ...
  echo "anchor ucx_perftest tag_bw $w1 -> $s1: $(awk '{print $7}' <<<"$perftest") MiB/s" >> "$out/traffic.txt"
fi
cpu_busy() { awk '/^cpu /{print $2+$3+$4+$7+$8, $2+$3+$4+$5+$6+$7+$8}' /proc/stat; }
for s in $servers; do
  server_hosts=$(for ((j = 1; j <= s; j++)); do printf '%s%s' "${sep2:-}" "$(addr $((workers + j)))"; sep2=,; done)
  unset sep2
  before=(); for ((i = 1; i < nhosts; i++)); do before+=("$(netns_link_bytes "$i")"); done
  read -r busy0 total0 < <(cpu_busy)
  # Every 100 ms, the bytes through the first worker's and the first server's links (the bridge
  # side: tx = into the host, rx = out of it), for the timeline of a round.
  ( while :; do
      echo "$(date +%s.%N) $(cat /sys/class/net/vb1/statistics/{tx,rx}_bytes | tr '\n' ' ')$(cat /sys/class/net/vb$((workers + 1))/statistics/{tx,rx}_bytes | tr '\n' ' ')"
      sleep 0.1
    done > "$out/links-S$s.txt" ) & sampler=$!
  start=$(date +%s.%N)
  cmd=("$bin/psbench" suite -b "$model" -e "$model" --transports "${transports// /,}" -n "$workers" -s "$s"
       --iters "$iters" --warmup "$warmup" --link-gbps "$link" --json "$out/scaling-S$s.json" --timeout 600
       --ceiling off  # the anchors above; keeps the link counters to the job
       -- --launcher ssh --ssh-args "$ssh_args" -H "$worker_hosts" --server-hosts "$server_hosts"
       --interface 10.9.0.0/24 --partition-bytes "$slice")
  echo "+ ip netns exec psrt-s0 ${cmd[*]}" >> "$out/scaling.txt"
  ip netns exec psrt-s0 "${cmd[@]}" 2> "$out/scaling-S$s.log" | tee -a "$out/scaling.txt"
  end=$(date +%s.%N)
  kill "$sampler"; wait "$sampler" 2>/dev/null || true
  read -r busy1 total1 < <(cpu_busy)
  {
    awk -v s="$s" -v t="$end - $start" -v a="$start" -v b="$end" -v u="$busy1 $busy0 $total1 $total0" \
      -v n="$(nproc)" 'BEGIN { split(u, c, " ");
        printf "S=%s: %.1f s, CPU busy %.0f %% of %s cores; bytes through each link (MiB):", s,
               b - a, 100 * (c[1] - c[2]) / (c[3] - c[4]), n }' 
    for ((i = 1; i < nhosts; i++)); do
      printf ' %s=%d' "$(addr "$i")" $(( ($(netns_link_bytes "$i") - ${before[$((i - 1))]}) >> 20 ))
    done
    echo
  } >> "$out/traffic.txt"
done
cat "$out/traffic.txt"
"$repo/perf/plot_suite" -o "$out/scaling" --title "N=$workers workers, links $rate (tbf), $model model" \
  "$out"/scaling-S*.json
