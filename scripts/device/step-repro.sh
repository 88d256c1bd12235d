#!/usr/bin/env bash
# Do speedups reproduce? The three correct examples evaluated five times each in a row on one node
# (W = 1, default warm-up and iterations): the speedup on the judge's clock, its interval over the
# baseline's rounds, PKB's events figure, both sides' judge time and events' median, and the whole
# evaluation's wall time. Then the median and spread of each example's five speedups.
# The node's baseline (worker/engine/baseline_store.h) starts empty on a fresh machine:
# PKB_REPRO_BASELINES (default 15) reference-only runs per problem come first, as a node's earlier
# jobs would have measured it (the eager reference's figure differs between processes, so its
# median settles only over many).
# PKB_REPRO_FLAGS: more pkb-eval flags for every run (the baseline-only ones too: the node's
# baseline is keyed by them), e.g. "--min-window-ms 100".
BIN=$1; OUT=$2
read -r -a FLAGS <<<"${PKB_REPRO_FLAGS:-}"
# PKB_REPRO_EXAMPLES: which of the three examples (default all).
EXAMPLES=${PKB_REPRO_EXAMPLES:-p001_allreduce_symm p002_allgather_symm p013_gemm_allreduce_symm}
echo "flags: ${FLAGS[*]:-(none)}"
for ex in $EXAMPLES; do
  p=$((10#${ex:1:3}))
  for i in $(seq "${PKB_REPRO_BASELINES:-15}"); do
    "$BIN/pkb-eval" -p "$p" -w 1 ${FLAGS[@]+"${FLAGS[@]}"} --baseline-only --json 2>/dev/null | python3 -c \
      'import json,sys; r=json.load(sys.stdin); print("baseline-only p'"$p"'", r["status"], "%.2f us" % r["baseline"]["wall_per_iter_us"], [round(x,2) for x in r["baseline"].get("round_wall_per_iter_us",[])])'
  done
done
for ex in $EXAMPLES; do
  p=$((10#${ex:1:3}))
  for i in 1 2 3 4 5; do
    t0=$(date +%s.%N)
    "$BIN/pkb-eval" -p "$p" -w 1 ${FLAGS[@]+"${FLAGS[@]}"} --json "problems/examples/$ex.cu" 2>"$OUT/repro-$ex-$i.err" \
      > "$OUT/repro-$ex-$i.json"
    t1=$(date +%s.%N)
    python3 - "$OUT/repro-$ex-$i.json" "$ex" "$(python3 -c "print($t1 - $t0)")" <<'PY'
import json, sys
r = json.load(open(sys.argv[1])); c = r.get("candidate", {}); b = r.get("baseline", {})
print("%-26s %-8s speedup %6.3f [%6.3f, %6.3f] in-job %6.3f events %6.3f graph %6.3f | node base %7.2f (%d) | judge cand %7.2f (%d calls) base %7.2f us (%d calls) | events cand %7.2f base %7.2f us | rounds cand %s base %s | %.2f s | %s"
      % (sys.argv[2], r["status"], r.get("speedup", 0), r.get("speedup_low", 0), r.get("speedup_high", 0),
         r.get("speedup_in_job", 0), r.get("speedup_events", 0), r.get("speedup_graph", 0),
         r.get("baseline_node_us", 0), r.get("baseline_node_samples", 0),
         c.get("wall_per_iter_us", 0), c.get("iterations", 0), b.get("wall_per_iter_us", 0),
         b.get("iterations", 0), c.get("median_us", 0), b.get("median_us", 0),
         ",".join("%.2f" % x for x in c.get("round_wall_per_iter_us", [])),
         ",".join("%.2f" % x for x in b.get("round_wall_per_iter_us", [])), float(sys.argv[3]),
         r["message"][:60]))
PY
  done
done
python3 - "$OUT" "$EXAMPLES" <<'PY'
import glob, json, statistics, sys
for ex in sys.argv[2].split():
    s = [json.load(open(f)).get("speedup", 0) for f in sorted(glob.glob(f"{sys.argv[1]}/repro-{ex}-*.json"))]
    s = [x for x in s if x > 0]
    if not s: print(ex, "no speedups"); continue
    m = statistics.median(s)
    print("%-26s speedups %s  median %.3f  spread %+.1f%% / %+.1f%% of the median"
          % (ex, " ".join("%.3f" % x for x in s), m, 100 * (min(s) / m - 1), 100 * (max(s) / m - 1)))
    c = [json.load(open(f)).get("candidate", {}).get("wall_per_iter_us", 0)
         for f in sorted(glob.glob(f"{sys.argv[1]}/repro-{ex}-*.json"))]
    c = [x for x in c if x > 0]
    if c:
        mc = statistics.median(c)
        print("%-26s candidate us per call %s  median %.2f  spread %+.1f%% / %+.1f%%"
              % (ex, " ".join("%.2f" % x for x in c), mc, 100 * (min(c) / mc - 1), 100 * (max(c) / mc - 1)))
    # What one window per job would have given: each job's first round alone.
    f = [(json.load(open(f)).get("candidate", {}).get("round_wall_per_iter_us") or [0])[0]
         for f in sorted(glob.glob(f"{sys.argv[1]}/repro-{ex}-*.json"))]
    f = [x for x in f if x > 0]
    if f:
        mf = statistics.median(f)
        print("%-26s first round alone us per call %s  median %.2f  spread %+.1f%% / %+.1f%%"
              % (ex, " ".join("%.2f" % x for x in f), mf, 100 * (min(f) / mf - 1), 100 * (max(f) / mf - 1)))
PY
