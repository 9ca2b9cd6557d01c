# shellcheck shell=bash
# perf/netns_hosts.sh: hosts on one machine for the perf experiments, sourced by a script that
# already runs inside tests/multihost/private_net.sh (throwaway network, mount and PID
# namespaces). Host i is the namespace psrt-s<i> at 10.9.0.(10+i), on the bridge psrt-br (the
# bridge side of its link is the veth vb<i>); host 0 is the launcher's, never shaped. Every host
# runs an sshd reached with $ssh_args.
#
#   netns_hosts_up COUNT WORKDIR     # builds hosts 0..COUNT-1 and their sshds; sets ssh_args
#   netns_shape RATE                 # tc tbf RATE on both directions of hosts 1.., or "none"
#   netns_link_bytes I               # bytes through host I's link (in + out)
#   netns_retrans I                  # TCP segments host I retransmitted so far (/proc/net/snmp)
#   netns_timeouts I                 # TCP retransmission timeouts on host I so far (TCPTimeouts)
#   netns_drops I                    # packets the tbf of host I's link dropped: "OUT IN"
#   netns_hosts_down                 # stops the sshds, deletes the namespaces and the bridge
netns_hosts=()
netns_work=
addr() { echo "10.9.0.$((10 + $1))"; }

netns_hosts_up() {
  local count=$1 i h try
  netns_work=$2
  mkdir -p "$netns_work" /run/sshd
  ip link set lo up
  ip link add psrt-br type bridge
  ip addr add 10.9.0.1/24 dev psrt-br
  ip link set psrt-br up
  ssh-keygen -q -t ed25519 -N '' -f "$netns_work/host_key"
  ssh-keygen -q -t ed25519 -N '' -f "$netns_work/id"
  cp "$netns_work/id.pub" "$netns_work/authorized_keys"
  for ((i = 0; i < count; i++)); do
    h=psrt-s$i; netns_hosts+=("$h")
    ip netns add "$h"
    ip link add "vb$i" type veth peer name eth0 netns "$h"
    ip link set "vb$i" master psrt-br
    ip link set "vb$i" up
    ip -n "$h" link set lo up
    ip -n "$h" addr add "$(addr "$i")/24" dev eth0
    ip -n "$h" link set eth0 up
    printf 'Port 22\nListenAddress %s\nHostKey %s\nAuthorizedKeysFile %s\nPidFile %s\nStrictModes no\nUsePAM no\nPermitRootLogin prohibit-password\nPasswordAuthentication no\nKbdInteractiveAuthentication no\nLogLevel ERROR\nMaxStartups 100\nMaxSessions 100\n' \
      "$(addr "$i")" "$netns_work/host_key" "$netns_work/authorized_keys" "$netns_work/sshd-$i.pid" \
      > "$netns_work/sshd-$i.conf"
    ip netns exec "$h" /usr/sbin/sshd -f "$netns_work/sshd-$i.conf" -E "$netns_work/sshd-$i.log"
  done
  ssh_args="-F /dev/null -i $netns_work/id -o IdentitiesOnly=yes -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o BatchMode=yes -o LogLevel=ERROR -o ConnectTimeout=5"
  for ((i = 1; i < count; i++)); do  # every sshd answers (bounded: 50 tries)
    for try in $(seq 50); do
      # shellcheck disable=SC2086  # ssh_args is a list of options
      ip netns exec psrt-s0 ssh $ssh_args "$(addr "$i")" true 2>/dev/null && break
      [ "$try" = 50 ] && { echo "netns_hosts.sh: sshd on $(addr "$i") does not answer" >&2; return 1; }
      sleep 0.1
    done
  done
}

netns_shape() {
  local rate=$1 i
  for ((i = 1; i < ${#netns_hosts[@]}; i++)); do
    ip netns exec "psrt-s$i" tc qdisc del dev eth0 root 2>/dev/null || true
    tc qdisc del dev "vb$i" root 2>/dev/null || true
    [ "$rate" = none ] && continue
    # The link, both ways: out of the host, and into it (the bridge side).
    ip netns exec "psrt-s$i" tc qdisc add dev eth0 root tbf rate "$rate" burst 256kb latency 50ms
    tc qdisc add dev "vb$i" root tbf rate "$rate" burst 256kb latency 50ms
  done
}

netns_link_bytes() {
  echo $(( $(cat "/sys/class/net/vb$1/statistics/tx_bytes") + $(cat "/sys/class/net/vb$1/statistics/rx_bytes") ))
}

netns_retrans() {
  # shellcheck disable=SC2016  # awk's own $ fields
  ip netns exec "psrt-s$1" awk '/^Tcp:/ { if (!h) { for (i = 1; i <= NF; i++) f[$i] = i; h = 1 }
    else print $f["RetransSegs"] }' /proc/net/snmp
}

netns_timeouts() {
  # shellcheck disable=SC2016  # awk's own $ fields
  ip netns exec "psrt-s$1" awk '/^TcpExt:/ { if (!h) { for (i = 1; i <= NF; i++) f[$i] = i; h = 1 }
    else print $f["TCPTimeouts"] }' /proc/net/netstat
}

netns_drops() {  # what tbf dropped going out of host I (its eth0) and coming in (the bridge's vbI)
  local out in
  out=$(ip netns exec "psrt-s$1" tc -s qdisc show dev eth0 | sed -n 's/.*dropped \([0-9]*\).*/\1/p' | head -1)
  in=$(tc -s qdisc show dev "vb$1" | sed -n 's/.*dropped \([0-9]*\).*/\1/p' | head -1)
  echo "${out:-0} ${in:-0}"
}

netns_hosts_down() {
  local p h
  for p in "$netns_work"/sshd-*.pid; do [ -f "$p" ] && kill "$(cat "$p")" 2>/dev/null; done
  for h in "${netns_hosts[@]}"; do ip netns del "$h" 2>/dev/null; done
  ip link del psrt-br 2>/dev/null
  return 0
}
