#!/usr/bin/env bash
# The main job until the parameter server lands: a short transport demo. For every backend this
# build has, psbench starts a peer process on 127.0.0.1 and measures 8-byte latency and 4 MiB
# bandwidth; one JSON line per measurement.
set -euo pipefail
bin=${1:-build/bin}
for t in $("$bin/psbench" backends); do
  echo "== transport $t: 8-byte ping-pong latency, then 4 MiB streaming bandwidth"
  "$bin/psbench" transport --transport "$t" --mode lat --size 8 --iters 20000
  "$bin/psbench" transport --transport "$t" --mode bw --size 4194304 --iters 200
done
