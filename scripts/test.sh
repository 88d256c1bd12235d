#!/usr/bin/env bash
# The test command (README.md): configure, build and run every test that this machine can run.
# GPU tests are skipped, with the reason printed, on machines without a GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/sandbox-paths.sh
# Submissions run in a bubblewrap sandbox (docs/security.md). Where user namespaces are disabled
# it cannot be built: the sandbox's own tests then report themselves skipped, and the other
# engine tests run unsandboxed, said here plainly.
if ! bwrap --unshare-all --ro-bind /usr /usr --symlink usr/lib /lib --symlink usr/lib64 /lib64 \
     --symlink usr/bin /bin /bin/true 2>/dev/null; then
  echo "WARNING: bubblewrap cannot build a sandbox on this machine; engine tests run with PKB_SANDBOX=off"
  export PKB_SANDBOX=off
fi
BUILD=${PKB_BUILD_DIR:-build}
JOBS=${PKB_JOBS:-$(nproc)}
export CCACHE_DIR=${CCACHE_DIR:-$HOME/.cache/ccache}
# Paths relative to the checkout in ccache's keys, so another clone reuses the cache.
export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$PWD} CCACHE_NOHASHDIR=${CCACHE_NOHASHDIR:-1}
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPKB_WITH_SERVICE=ON \
  -DPKB_WITH_MPI=ON -DPKB_WITH_CUDA=OFF -DPKB_BUILD_TESTS=ON
cmake --build "$BUILD" -j "$JOBS"
(cd "$BUILD" && ctest --output-on-failure -j "$JOBS" --timeout 600 "$@")
# The libFuzzer targets (docs/security.md): their own clang build, a bounded run each. Skipped
# when ctest is asked for a subset (arguments given) or PKB_FUZZ_SECONDS=0.
if [ $# -eq 0 ] && [ "${PKB_FUZZ_SECONDS:-60}" != 0 ]; then
  PKB_JOBS=$JOBS bash tests/fuzz/run.sh
fi
