#!/usr/bin/env bash
# How the events of honest runs sit against the judge's wall clock (verdict.cc compares the wall
# clock per iteration with 1.5x the events' mean and 2x their median, plus a fixed slack): the
# three correct examples at the default warm-up and iterations, three runs each.
BIN=$1; OUT=$2
for ex in p001_allreduce_symm p002_allgather_symm p013_gemm_allreduce_symm; do
  p=$((10#${ex:1:3}))
  for i in 1 2 3; do
    "$BIN/pkb-eval" -p "$p" -w 1 --json "problems/examples/$ex.cu" 2>/dev/null > "$OUT/timing-$ex-$i.json"
    python3 - "$OUT/timing-$ex-$i.json" "$ex" <<'PY'
import json, sys
r = json.load(open(sys.argv[1])); c = r.get("candidate", {})
med, mean, wall = c.get("median_us", 0), c.get("mean_us", 0), c.get("wall_per_iter_us", 0)
print("%-26s %-8s median %7.2f  mean %7.2f  p90 %7.2f  wall %7.2f us/iter  wall/median %.2f  wall/mean %.2f | %s"
      % (sys.argv[2], r["status"], med, mean, c.get("p90_us", 0), wall,
         wall / med if med else 0, wall / mean if mean else 0, r["message"][:80]))
PY
  done
done
