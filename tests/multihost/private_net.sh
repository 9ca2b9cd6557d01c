#!/bin/sh
# private_net.sh COMMAND [ARGS...]: runs COMMAND in throwaway namespaces for the multi-host tests.
#
# New network, mount and PID namespaces (unshare --net --mount --pid): the bridge, veths and
# per-host network namespaces the test builds exist only in there, /run/netns is a private tmpfs
# (so `ip netns add` leaves no name behind), /sys is remounted (so /sys/class/net shows the
# namespace's own links and their byte counters), /tmp is a private tmpfs (keys,
# configs and logs vanish with the namespace), loopback is up, and when COMMAND ends or this script is killed
# (--kill-child) the kernel kills every process the test started on any of its hosts. A shell
# stays PID 1 of the namespace (it reaps orphans) and exits with COMMAND's status.
#
# Where unshare is not allowed (no CAP_SYS_ADMIN), COMMAND runs as it is with
# PSRT_PRIVATE_NET_ERROR set, and the tests skip saying why.
set -u
if err=$(unshare --net --mount true 2>&1); then
  mkdir -p /run/netns
  exec unshare --net --mount --propagation private --pid --fork --mount-proc --kill-child -- \
    /bin/sh -c 'mount -t tmpfs psrt-netns /run/netns && mount -t sysfs psrt-sys /sys &&
  mount -t tmpfs psrt-tmp /tmp || exit 1
ip link set lo up 2>/dev/null
PSRT_PRIVATE_NET=1 "$@"
rc=$?
exit $rc' private_net "$@"
fi
PSRT_PRIVATE_NET_ERROR=${err:-unshare failed} exec "$@"
