#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (ASan, UBSan and libFuzzer on everything they link) in
# their own build folder and runs each for a bounded time, from an empty corpus. Any crash,
# sanitizer report, leak or broken invariant fails the run; the input that did it is kept as
# $BUILD/fuzz-<target>-crash-* (reproduce: $BUILD/tests/fuzz/<target> <that file>).
#   tests/fuzz/run.sh            (PKB_FUZZ_SECONDS per target, default 60)
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${PKB_FUZZ_BUILD_DIR:-build-fuzz}
SECS=${PKB_FUZZ_SECONDS:-60}
export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$PWD} CCACHE_NOHASHDIR=${CCACHE_NOHASHDIR:-1}
CC=clang CXX=clang++ cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DPKB_FUZZ=ON -DPKB_WITH_SERVICE=ON -DPKB_WITH_MPI=OFF -DPKB_WITH_CUDA=OFF \
  -DPKB_BUILD_TESTS=OFF >/dev/null
targets=(scheduler_fuzz engine_reports_fuzz)
cmake --build "$BUILD" -j "${PKB_JOBS:-$(nproc)}" --target "${targets[@]}"
status=0
for t in "${targets[@]}"; do
  corpus=$(mktemp -d)
  echo "== $t for ${SECS} s"
  if ! "$BUILD/tests/fuzz/$t" -max_total_time="$SECS" -rss_limit_mb=4096 -timeout=20 -max_len=1024 -len_control=0 \
       -print_final_stats=1 -artifact_prefix="$BUILD/fuzz-$t-" "$corpus" 2>"$BUILD/fuzz-$t.log"; then
    echo "FAILED: $t (log: $BUILD/fuzz-$t.log)"
    tail -40 "$BUILD/fuzz-$t.log"
    status=1
  else
    grep -E "^stat::(number_of_executed_units|new_units_added|peak_rss_mb)" "$BUILD/fuzz-$t.log" || true
  fi
  rm -rf "$corpus"
done
exit $status
