#!/bin/sh
# A Slurm cluster (slurmctld, slurmd, munged on a private socket) in DIR, as root and without
# systemd, for tests. `slurm_cluster.sh start DIR CTLD_PORT SLURMD_PORT` makes a one-node cluster
# (slurmd -N localhost) and waits (bounded) until the node is idle.
# `slurm_cluster.sh start DIR CTLD_PORT SLURMD_PORT CTLD_ADDR NAME=ADDR...` declares those nodes
# with slurmctld reached at CTLD_ADDR, and starts no slurmd: the caller starts
# `slurmd -N NAME` on each host (in its network namespace) and waits for them.
# `slurm_cluster.sh stop DIR` stops every daemon by its pidfile (SIGTERM, then SIGKILL) and removes
# nothing else. Tools run with SLURM_CONF=DIR/slurm.conf.
set -eu
cmd=$1
dir=$2

stop_pidfile() {
  [ -f "$1" ] || return 0
  pid=$(cat "$1" 2>/dev/null || true)
  [ -n "$pid" ] || return 0
  kill "$pid" 2>/dev/null || return 0
  i=0
  while kill -0 "$pid" 2>/dev/null && [ $i -lt 50 ]; do sleep 0.1; i=$((i + 1)); done
  kill -9 "$pid" 2>/dev/null || true
}

if [ "$cmd" = stop ]; then
  for f in "$dir"/slurmd*.pid; do stop_pidfile "$f"; done
  stop_pidfile "$dir/slurmctld.pid"
  stop_pidfile "$dir/munge/munged.pid"
  exit 0
fi

ctld_port=$3
slurmd_port=$4
shift 4
ctld_host=localhost
nodes="NodeName=localhost NodeAddr=127.0.0.1 CPUs=8 RealMemory=1000 State=UNKNOWN"
names=localhost
if [ $# -gt 0 ]; then
  ctld_host="$(hostname)($1)"
  shift
  nodes=""
  names=""
  for n in "$@"; do
    nodes="$nodes
NodeName=${n%%=*} NodeAddr=${n#*=} CPUs=8 RealMemory=1000 State=UNKNOWN"
    names="$names${names:+,}${n%%=*}"
    mkdir -p "$dir/slurmd.${n%%=*}"
  done
fi
mkdir -p "$dir/munge" "$dir/slurmctld" "$dir/slurmd.localhost"
chmod 755 "$dir"
chown munge:munge "$dir/munge"
chmod 755 "$dir/munge"
runuser -u munge -- /usr/sbin/munged --socket="$dir/munge/socket" \
  --pid-file="$dir/munge/munged.pid" --log-file="$dir/munge/munged.log" \
  --seed-file="$dir/munge/munged.seed"
cat > "$dir/slurm.conf" <<CONF
ClusterName=psrt-test
SlurmctldHost=$ctld_host
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$dir/munge/socket
CredType=cred/munge
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
ReturnToService=2
StateSaveLocation=$dir/slurmctld
SlurmdSpoolDir=$dir/slurmd.%n
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.%n.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.%n.log
$nodes
PartitionName=debug Nodes=$names Default=YES MaxTime=INFINITE State=UP
CONF
export SLURM_CONF="$dir/slurm.conf"
slurmctld -i
[ "$names" = localhost ] || exit 0
slurmd -N localhost
i=0
until sinfo -h -o %T 2>/dev/null | grep -q idle; do
  i=$((i + 1))
  if [ $i -gt 150 ]; then
    echo "slurm_cluster.sh: the node did not become idle within 15 s" >&2
    tail -5 "$dir/slurmctld.log" "$dir"/slurmd.*.log >&2 || true
    exit 1
  fi
  sleep 0.1
done
