#!/usr/bin/env bash
# The timed window's fixed cost: problem 1's example at 10 and 100 timed iterations, the host
# wall clock per iteration against the mean of the events (the timing-escape check compares
# them), three runs each, with the rank's log line on where the window's wall clock went.
BIN=$1; OUT=$2
for it in 10 100; do
  for i in 1 2 3; do
    rm -rf /tmp/pkb-window && mkdir -p /tmp/pkb-window
    "$BIN/pkb-eval" -p 1 -w 1 --warmup 50 --iters "$it" --json --keep-scratch --scratch /tmp/pkb-window \
      problems/examples/p001_allreduce_symm.cu 2>/dev/null > "$OUT/window-$it-$i.json"
    python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); c=r.get("candidate",{}); s=r.get("stage_seconds",{}); print("iters %s: %-8s median %6.2f us, mean %6.2f us, wall %7.2f us/iter, run %.2f s | %s" % (sys.argv[2], r["status"], c.get("median_us",0), c.get("mean_us",0), c.get("wall_per_iter_us",0), s.get("run",0), r["message"][:90]))' "$OUT/window-$it-$i.json" "$it"
    find /tmp/pkb-window -name rank0.log -exec grep -h "timed window" {} + | sed 's/^/    /'
  done
done
rm -rf /tmp/pkb-window
