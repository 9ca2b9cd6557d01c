#!/bin/sh
# private_net.sh COMMAND [ARGS...]: runs COMMAND in throwaway namespaces for the multi-host tests.
#
# New network, mount and PID namespaces (unshare --net --mount --pid): the bridge, veths and
# per-host network namespaces the test builds exist only in there, /run/netns is a private tmpfs
# (so `ip netns add` leaves no name behind), /sys is remounted (so /sys/class/net shows the
# namespace's own links and their byte counters), /tmp is a private tmpfs (keys,
# configs and logs vanish with the namespace), the user's home directory is an empty tmpfs (the
# login shells that sshd starts on the hosts run no startup files of the real home, and a test
# that kills such a shell cannot leave a lock or file behind there), loopback is up, and when COMMAND ends or this script is killed
# (--kill-child) the kernel kills every process the test started on any of its hosts. A shell
# stays PID 1 of the namespace (it reaps orphans) and exits with COMMAND's status.
#
# Where unshare is not allowed (no CAP_SYS_ADMIN), COMMAND runs as it is with
# PSRT_PRIVATE_NET_ERROR set, and the tests skip saying why.
set -u
# The repository, the command's directory and the working directory stay visible when they lie
# below /tmp or the home directory (a checkout in /tmp, a build in the home directory): the top
# directory of each below those is bind-mounted back over the private tmpfs.
repo=$(cd "$(dirname "$0")/../.." && pwd)
cmd_dir=$(cd "$(dirname "$1")" 2>/dev/null && pwd || echo "$PWD")
if err=$(unshare --net --mount true 2>&1); then
  mkdir -p /run/netns /run/psrt-private
  exec env PSRT_KEEP1="$repo" PSRT_KEEP2="$cmd_dir" PSRT_KEEP3="$PWD" \
    unshare --net --mount --propagation private --pid --fork --mount-proc --kill-child -- \
    /bin/sh -c '
# private DIR NAME: an empty tmpfs over DIR, with the top directory below DIR of each kept path
# bound back from the original (held under /run/psrt-private/NAME).
private() {
  hold=/run/psrt-private/$2
  mkdir -p "$hold" && mount --bind "$1" "$hold" && mount -t tmpfs "psrt-$2" "$1" || return 1
  for p in "$PSRT_KEEP1" "$PSRT_KEEP2" "$PSRT_KEEP3"; do
    case "$p" in
      "$1"/*) top=${p#"$1"/}; top=${top%%/*}
              mkdir -p "$1/$top" && mount --bind "$hold/$top" "$1/$top" || return 1 ;;
    esac
  done
}
mount -t tmpfs psrt-netns /run/netns && mount -t sysfs psrt-sys /sys &&
  mount -t tmpfs psrt-private /run/psrt-private && private /tmp tmp || exit 1
home=$(getent passwd "$(id -u)" | cut -d: -f6)
[ -d "$home" ] && [ "$home" != / ] && { private "$home" home || exit 1; }
cd "$PSRT_KEEP3" 2>/dev/null || cd /
ip link set lo up 2>/dev/null
PSRT_PRIVATE_NET=1 "$@"
rc=$?
exit $rc' private_net "$@"
fi
PSRT_PRIVATE_NET_ERROR=${err:-unshare failed} exec "$@"
