#!/usr/bin/env bash
# Every reference's own time at W=1: pkb-eval --baseline-only (500 warm-up + 100 timed calls,
# rotating input sets), one line per problem.
BIN=$1; OUT=$2
# BASELINE_FROM=31: only problems with ids from 31 on (the others already recorded).
ids=$("$BIN/pkb-eval" --catalog | python3 -c 'import json,sys,os; f=int(os.environ.get("BASELINE_FROM","0")); print(" ".join(str(p["id"]) for p in json.load(sys.stdin)["problems"] if p["id"] >= f))')
# BASELINE_IDS="43 52 ...": exactly these.
[ -z "${BASELINE_IDS:-}" ] || ids=$BASELINE_IDS
for p in $ids; do
  "$BIN/pkb-eval" -p "$p" -w 1 --baseline-only --json > "$OUT/baseline-$p.json" 2>/dev/null
  python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); b=r.get("baseline",{}); print("problem %3s %-28s %-9s median %8.2f us  p10 %8.2f  p90 %8.2f  sets %s  %s" % (r["problem_id"], r.get("problem_slug",""), r["status"], b.get("median_us",0), b.get("p10_us",0), b.get("p90_us",0), b.get("input_sets",0), r["message"][:80]))' "$OUT/baseline-$p.json"
done
