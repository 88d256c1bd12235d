#!/usr/bin/env bash
# pkb-eval --gpus (a share of the node's GPUs, gpu_select.h) on a real GPU: the worked example of
# problem 1 on the share of this node's first GPU (its UUID); a UUID the driver does not list;
# and two evaluations at once on the same share, the second waiting for the first's GPU lock.
BIN=$1; OUT=$2
ex=problems/examples/p001_allreduce_symm.cu
uuid=$(nvidia-smi --query-gpu=uuid --format=csv,noheader | head -1)
echo "share: $uuid (of $(nvidia-smi --query-gpu=uuid --format=csv,noheader | wc -l) GPU(s)); /dev: $(ls /dev | grep nvidia | tr '\n' ' ')"
summary() {
  python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); print(sys.argv[2] + ":", r["status"], r["message"][:160])' "$1" "$2"
}
"$BIN/pkb-eval" -p 1 -w 1 --gpus "$uuid" --json "$ex" > "$OUT/share.json" 2> "$OUT/share.err"
echo "exit $?"; summary "$OUT/share.json" "on the share"
"$BIN/pkb-eval" -p 1 -w 1 --gpus GPU-00000000-0000-0000-0000-000000000000 --json "$ex"
echo "a UUID the driver does not list: exit $?"
for i in 1 2; do
  "$BIN/pkb-eval" -p 1 -w 1 --gpus "$uuid" --events --json "$ex" > "$OUT/both-$i.out" 2>/dev/null &
  sleep 0.3
done
wait
for i in 1 2; do
  sed -n '/^{$/,$p' "$OUT/both-$i.out" > "$OUT/both-$i.json"  # the result after the event lines
  summary "$OUT/both-$i.json" "at once $i"
  grep -c "waiting for this node's GPUs" "$OUT/both-$i.out" | sed "s/^/  waited for the lock (lines): /"
done
