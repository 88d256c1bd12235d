#!/usr/bin/env bash
# Do speedups reproduce? The three correct examples evaluated five times each in a row on one node
# (W = 1, default warm-up and iterations): the speedup on the judge's clock, its interval over the
# baseline's rounds, PKB's events figure, both sides' judge time and events' median, and the whole
# evaluation's wall time. Then the median and spread of each example's five speedups.
# The node's baseline (worker/engine/baseline_store.h) starts empty on a fresh machine:
# PKB_REPRO_BASELINES (default 15) reference-only runs per problem come first, as a node's earlier
# jobs would have measured it (the eager reference's figure differs between processes, so its
# median settles only over many). Each line says the compiles counted beside it and how many
# measurements the node's baseline then held (it grows only where none ran beside).
# PKB_REPRO_FLAGS: more pkb-eval flags for every run (the baseline-only ones too: the node's
# baseline is keyed by them), e.g. "--min-window-ms 100".
BIN=$1; OUT=$2
read -r -a FLAGS <<<"${PKB_REPRO_FLAGS:-}"
# PKB_REPRO_EXAMPLES: which of the three examples (default all); an entry with a slash is a source
# path (its name says the problem, pNNN_...), e.g. tests/engine/gpu_candidates/p001_many_launches.cu.
EXAMPLES=${PKB_REPRO_EXAMPLES:-p001_allreduce_symm p002_allgather_symm p013_gemm_allreduce_symm}
# The source of an entry, and its name in the logs.
source_of() { if [[ $1 == */* ]]; then echo "$1"; else echo "problems/examples/$1.cu"; fi; }
name_of() { basename "$1" .cu; }
echo "flags: ${FLAGS[*]:-(none)}"
for entry in $EXAMPLES; do
  ex=$(name_of "$entry")
  p=$((10#${ex:1:3}))
  for i in $(seq "${PKB_REPRO_BASELINES:-15}"); do
    "$BIN/pkb-eval" -p "$p" -w 1 ${FLAGS[@]+"${FLAGS[@]}"} --baseline-only --json 2>/dev/null | python3 -c \
      'import json,sys; r=json.load(sys.stdin); print("baseline-only p'"$p"'", r["status"], "%.2f us" % r["baseline"]["wall_per_iter_us"], [round(x,2) for x in r["baseline"].get("round_wall_per_iter_us",[])], "compiles beside", r.get("compiles_beside", 0), "node baseline", r.get("baseline_node_samples", 0))'
  done
done
for entry in $EXAMPLES; do
  ex=$(name_of "$entry")
  p=$((10#${ex:1:3}))
  for i in 1 2 3 4 5; do
    t0=$(date +%s.%N)
    "$BIN/pkb-eval" -p "$p" -w 1 ${FLAGS[@]+"${FLAGS[@]}"} --json "$(source_of "$entry")" 2>"$OUT/repro-$ex-$i.err" \
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
python3 - "$OUT" "$(for e in $EXAMPLES; do name_of "$e"; done | paste -sd' ' -)" <<'PY'
import glob, json, statistics, sys

def spread(ex, what, values, fmt):
    """One line: the runs' values, their median and spread (runs without a value left out)."""
    v = [x for x in values if x > 0]
    if not v:
        return print(ex, "no", what)
    m = statistics.median(v)
    print(("%-26s %s %s  median " + fmt + "  spread %+.1f%% / %+.1f%% of the median")
          % (ex, what, " ".join(fmt % x for x in v), m, 100 * (min(v) / m - 1), 100 * (max(v) / m - 1)))

for ex in sys.argv[2].split():
    runs = [json.load(open(f)) for f in sorted(glob.glob(f"{sys.argv[1]}/repro-{ex}-*.json"))]
    spread(ex, "speedups", [r.get("speedup", 0) for r in runs], "%.3f")
    spread(ex, "candidate us per call", [r.get("candidate", {}).get("wall_per_iter_us", 0) for r in runs], "%.2f")
    # What one window per job would have given: each job's first round alone.
    spread(ex, "first round alone us per call",
           [(r.get("candidate", {}).get("round_wall_per_iter_us") or [0])[0] for r in runs], "%.2f")
PY
