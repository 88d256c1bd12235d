#!/usr/bin/env bash
# bench/eval_latency: one full evaluation of problem 1 (5 trials + timing of candidate and
# baseline, 500 warm-up + 100 timed each) end to end, with a cold and a warm compile cache.
BIN=$1; OUT=$2
EX=problems/examples/p001_allreduce_symm.cu
for i in 1 2 3; do
  rm -rf /tmp/pkb-cache-bench
  s=$(date +%s.%N); "$BIN/pkb-eval" -p 1 -w 1 --cache-dir /tmp/pkb-cache-bench --json "$EX" > "$OUT/bench-cold-$i.json"; e=$(date +%s.%N)
  echo "cold $i: $(echo "$e - $s" | bc) s $(python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); print(r["status"], r["stage_seconds"], "cand", r["candidate"]["median_us"], "base", r["baseline"]["median_us"], "speedup", r.get("speedup"))' "$OUT/bench-cold-$i.json")"
  s=$(date +%s.%N); "$BIN/pkb-eval" -p 1 -w 1 --cache-dir /tmp/pkb-cache-bench --json "$EX" > "$OUT/bench-warm-$i.json"; e=$(date +%s.%N)
  echo "warm $i: $(echo "$e - $s" | bc) s $(python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); print(r["status"], r["stage_seconds"], "cand", r["candidate"]["median_us"], "base", r["baseline"]["median_us"], "speedup", r.get("speedup"))' "$OUT/bench-warm-$i.json")"
done
"$BIN/pkb-eval" -p 1 -w 1 --cache-dir /tmp/pkb-cache-bench "$EX"
