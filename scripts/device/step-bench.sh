#!/usr/bin/env bash
# bench/eval_latency: one full evaluation of problem 1 (5 trials + timing of candidate and
# baseline, 500 warm-up + 100 timed each) end to end, with a cold and a warm compile cache.
BIN=$1; OUT=$2
EX=${PKB_BENCH_EXAMPLE:-problems/examples/p001_allreduce_symm.cu}
python3 - "$BIN/pkb-eval" "$EX" "$OUT" <<'PY'
import json, shutil, subprocess, sys, time
ev, ex, out = sys.argv[1:4]
def run(tag, i):
    t0 = time.perf_counter()
    p = subprocess.run([ev, "-p", "1", "-w", "1", "--cache-dir", "/tmp/pkb-cache-bench", "--json", ex],
                       capture_output=True, text=True)
    wall = time.perf_counter() - t0
    r = json.loads(p.stdout)
    open(f"{out}/bench-{tag}-{i}.json", "w").write(p.stdout)
    st = r.get("stage_seconds", {})
    print(f"{tag} {i}: wall {wall:.2f} s, status {r['status']}, compile {st.get('compile', 0):.2f} s "
          f"(cache hit {r['compile'].get('cache_hit', False)}), ranks {st.get('run', 0):.2f} s "
          f"(verify {st.get('verify', 0):.2f}, benchmark {st.get('benchmark', 0):.2f}); candidate "
          f"{r['candidate']['median_us']:.2f} us, baseline {r['baseline']['median_us']:.2f} us, "
          f"speedup {r.get('speedup', 0):.3f}")
    return wall
cold, warm = [], []
for i in range(1, 4):
    shutil.rmtree("/tmp/pkb-cache-bench", ignore_errors=True)
    cold.append(run("cold", i))
    warm.append(run("warm", i))
print(f"median wall: cold {sorted(cold)[1]:.2f} s, warm {sorted(warm)[1]:.2f} s")
PY
"$BIN/pkb-eval" -p 1 -w 1 --cache-dir /tmp/pkb-cache-bench "$EX"
