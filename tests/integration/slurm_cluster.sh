#!/bin/sh
# A one-node Slurm cluster (slurmctld + slurmd -N localhost, munged on a private socket) in DIR,
# as root and without systemd, for tests: `slurm_cluster.sh start DIR CTLD_PORT SLURMD_PORT`
# writes DIR/slurm.conf and waits (bounded) until the node is idle; `slurm_cluster.sh stop DIR`
# stops the daemons by their pidfiles (SIGTERM, then SIGKILL) and removes nothing else.
# Tools then run with SLURM_CONF=DIR/slurm.conf.
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
  stop_pidfile "$dir/slurmd.pid"
  stop_pidfile "$dir/slurmctld.pid"
  stop_pidfile "$dir/munge/munged.pid"
  exit 0
fi

ctld_port=$3
slurmd_port=$4
mkdir -p "$dir/munge" "$dir/slurmctld" "$dir/slurmd"
chmod 755 "$dir"
chown munge:munge "$dir/munge"
chmod 755 "$dir/munge"
runuser -u munge -- /usr/sbin/munged --socket="$dir/munge/socket" \
  --pid-file="$dir/munge/munged.pid" --log-file="$dir/munge/munged.log" \
  --seed-file="$dir/munge/munged.seed"
cat > "$dir/slurm.conf" <<CONF
ClusterName=psrt-test
SlurmctldHost=localhost
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
SlurmdSpoolDir=$dir/slurmd
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.log
NodeName=localhost NodeAddr=127.0.0.1 CPUs=8 RealMemory=1000 State=UNKNOWN
PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP
CONF
export SLURM_CONF="$dir/slurm.conf"
slurmctld -i
slurmd -N localhost
i=0
until sinfo -h -o %T 2>/dev/null | grep -q idle; do
  i=$((i + 1))
  if [ $i -gt 150 ]; then
    echo "slurm_cluster.sh: the node did not become idle within 15 s" >&2
    tail -5 "$dir/slurmctld.log" "$dir/slurmd.log" >&2 || true
    exit 1
  fi
  sleep 0.1
done
