#!/usr/bin/env bash
# Is the judge alone on its GPU while it times? One evaluation's rank log says whether the driver
# answered (NVML); then two evaluations at once on the one GPU: each judge sees the other job's
# processes holding the GPU and must not trust its timings (INTERNAL), unless they did not overlap.
BIN=$1; OUT=$2
ex=problems/examples/p013_gemm_allreduce_symm.cu
scratch=$(mktemp -d /tmp/pkb-alone-XXXXXX); chmod 0711 "$scratch"
"$BIN/pkb-eval" -p 13 -w 1 --keep-scratch --scratch "$scratch" --json "$ex" 2>/dev/null |
  python3 -c 'import json,sys; r=json.load(sys.stdin); print("alone:", r["status"], r["message"][:120])'
echo "rank log lines on the GPU check (none: NVML answered and found the GPU alone):"
find "$scratch" -name 'rank*.log' | head -3
grep -rh "GPU's processes\|compute context" "$scratch" | sort | uniq -c || true
for i in 1 2; do
  "$BIN/pkb-eval" -p 13 -w 1 --warmup 3000 --iters 3000 --json "$ex" 2>/dev/null > "$OUT/together-$i.json" &
done
sleep 4; echo "compute apps seen by nvidia-smi outside the sandbox while both run:"
nvidia-smi --query-compute-apps=pid,process_name --format=csv,noheader || true
wait
for i in 1 2; do
  python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); print("together", sys.argv[2] + ":", r["status"], r["message"][:200])' "$OUT/together-$i.json" "$i"
done
