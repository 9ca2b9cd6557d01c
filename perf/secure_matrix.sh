#!/usr/bin/env bash
# The secure mode's cost: the same measurements with and without --secure, alternating, in one
# run. Usage: perf/secure_matrix.sh [BIN_DIR] [ROUNDS]   (prints one JSON line per measurement)
#   openssl speed -evp aes-256-gcm                                    (the AEAD's own speed)
#   psbench transport --transport T --mode bw --size 4194304,65536 --iters 200 [--secure]
#   psrun --transport T -n 1 -s 1 [--secure] -- psbench pushpull --size 4194304 --iters 200
set -euo pipefail
bin=${1:-build/bin}
rounds=${2:-3}
for r in $(seq "$rounds"); do
  for bytes in 65536 4194304; do
    kbps=$(openssl speed -evp aes-256-gcm -seconds 2 -bytes "$bytes" 2>/dev/null |
           awk '/^AES-256-GCM/ {sub("k", "", $2); print $2}')
    echo "{\"bench\":\"openssl\",\"round\":$r,\"size\":$bytes,\"MBps\":$(echo "$kbps" |
          awk '{printf "%.0f", $1 * 1000 / 1048576}')}"
  done
  for t in tcp ucx; do
    for secure in false true; do
      flag=""
      [ "$secure" = true ] && flag=--secure
      "$bin/psbench" transport --transport "$t" --mode bw --size 4194304,65536 --iters 200 \
          $flag 2>/dev/null | sed "s/^{/{\"round\":$r,/"
      "$bin/psrun" --transport "$t" -n 1 -s 1 $flag -- \
          "$bin/psbench" pushpull --size 4194304 --iters 200 2>/dev/null |
          grep -o '{.*}' | sed "s/^{/{\"round\":$r,\"secure\":$secure,/"
    done
  done
done
