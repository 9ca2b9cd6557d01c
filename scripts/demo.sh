#!/usr/bin/env bash
# The main job until the parameter server lands: a short transport demo. For every backend this
# build has, psbench starts a peer process on 127.0.0.1 and measures 8-byte latency and 4 MiB
# bandwidth; one JSON line per measurement.
set -euo pipefail
bin=${1:-build/bin}
for t in $("$bin/psbench" transport --help >/dev/null && (ldd "$bin/psbench" | grep -q libucp && echo ucx); echo tcp); do
  echo "== transport $t"
  "$bin/psbench" transport --transport "$t" --mode lat --size 8 --iters 20000
  "$bin/psbench" transport --transport "$t" --mode bw --size 4194304 --iters 200
done
