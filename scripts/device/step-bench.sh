#!/usr/bin/env bash
# bench/eval_latency on the GPU: problem 1's example end to end, stage by stage (run.py): the
# ranks started while the source compiles (overlap), one stage after the other (serial), and on
# an engine started ahead of the job (standby, as the worker runs it); cold and warm. Then W = 8
# as a functional run (the ranks share the GPU), the issue's proxy for a multi-GPU node.
BIN=$1; OUT=$2
EX=${PKB_BENCH_EXAMPLE:-problems/examples/p001_allreduce_symm.cu}
RUNS=${PKB_BENCH_RUNS:-3}
# PKB_BENCH_GAP: seconds between the standby's start and the job (a worker's time between jobs).
GAP=${PKB_BENCH_GAP:-2}
# PKB_BENCH_MODES: the W = 1 modes (default all three); the W = 8 run takes those of overlap and
# standby among them.
MODES=${PKB_BENCH_MODES:-overlap,serial,standby}
MODES8=$(tr ',' '\n' <<<"$MODES" | grep -x -e overlap -e standby | paste -sd, -)
# PKB_BENCH_KEEP_LOGS=1: every W = 1 run's scratch folder (its rank logs) under $OUT/scratch-w1.
KEEP=()
[ -n "${PKB_BENCH_KEEP_LOGS:-}" ] && KEEP=(--keep-logs "$OUT/scratch-w1")
python3 bench/eval_latency/run.py --pkb-eval "$BIN/pkb-eval" --runs "$RUNS" --out "$OUT/w1" \
  --modes "$MODES" --standby-gap "$GAP" --standby-shape 1:cuda ${KEEP[@]+"${KEEP[@]}"} -- -p 1 -w 1 "$EX"
[ -n "$MODES8" ] && python3 bench/eval_latency/run.py --pkb-eval "$BIN/pkb-eval" --runs "$RUNS" --out "$OUT/w8" \
  --modes "$MODES8" --standby-gap "$GAP" --standby-shape 8:cuda-shared -- -p 1 -w 8 --functional "$EX"
"$BIN/pkb-eval" -p 1 -w 1 --cache-dir /tmp/pkb-cache-bench "$EX"
