#!/usr/bin/env bash
# bench/eval_latency on the GPU: problem 1's example end to end, stage by stage (run.py), with
# the ranks started while the source compiles and one stage after the other, cold and warm; then
# W = 8 as a functional run (the ranks share the GPU), the proxy for a multi-GPU node.
BIN=$1; OUT=$2
EX=${PKB_BENCH_EXAMPLE:-problems/examples/p001_allreduce_symm.cu}
RUNS=${PKB_BENCH_RUNS:-3}
python3 bench/eval_latency/run.py --pkb-eval "$BIN/pkb-eval" --runs "$RUNS" --out "$OUT/w1" \
  -- -p 1 -w 1 "$EX"
python3 bench/eval_latency/run.py --pkb-eval "$BIN/pkb-eval" --runs "$RUNS" --out "$OUT/w8" \
  --modes overlap -- -p 1 -w 8 --functional "$EX"
"$BIN/pkb-eval" -p 1 -w 1 --cache-dir /tmp/pkb-cache-bench "$EX"
