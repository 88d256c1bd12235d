#!/usr/bin/env bash
# Where a timed round's time goes (issue 22): the worked examples of problems 1 and 13 at W = 1,
# three runs each, with each round's rank-log line (prepare, land, window, answer copies, times).
BIN=$1; OUT=$2
for ex in p001_allreduce_symm p013_gemm_allreduce_symm; do
  p=$((10#${ex:1:3}))
  for i in 1 2 3; do
    rm -rf /tmp/pkb-rounds && mkdir -p /tmp/pkb-rounds && chmod 0711 /tmp/pkb-rounds
    "$BIN/pkb-eval" -p "$p" -w 1 --json --keep-scratch --scratch /tmp/pkb-rounds \
      "problems/examples/$ex.cu" 2>/dev/null > "$OUT/rounds-$ex-$i.json"
    python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); s=r.get("stage_seconds",{}); print("%s %s: %s | benchmark %.3f s: inputs %.3f, window %.3f, checks %.3f" % (sys.argv[2], sys.argv[3], r["status"], s.get("benchmark",0), s.get("bench_inputs",0), s.get("bench_window",0), s.get("bench_checks",0)))' "$OUT/rounds-$ex-$i.json" "$ex" "$i"
    find /tmp/pkb-rounds -name 'rank0*.log' -exec grep -h ": round " {} + | sed 's/^/    /'
  done
done
rm -rf /tmp/pkb-rounds
