#!/usr/bin/env bash
# The main job until the training driver lands. For every backend this build has: the
# transport's 8-byte latency and 4 MiB bandwidth (psbench starts a peer on 127.0.0.1), then a
# parameter-server job — psrun with 2 workers and 1 server doing 4 MiB push_pull rounds.
set -euo pipefail
bin=${1:-build/bin}
for t in $("$bin/psbench" backends); do
  echo "== transport $t: 8-byte ping-pong latency, then 4 MiB streaming bandwidth"
  "$bin/psbench" transport --transport "$t" --mode lat --size 8 --iters 20000
  "$bin/psbench" transport --transport "$t" --mode bw --size 4194304 --iters 200
  echo "== psrun --transport $t -n 2 -s 1 -- psbench pushpull --size 4194304 --iters 50"
  PSRT_LOG_LEVEL=warn "$bin/psrun" --transport "$t" -n 2 -s 1 -- "$bin/psbench" pushpull \
    --size 4194304 --iters 50
done
