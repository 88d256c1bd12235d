#!/usr/bin/env bash
# Builds the GPU binaries (-DPKB_WITH_CUDA=ON, on this CPU machine) from a clean worktree of one
# commit and packs them into .carry/ for the device tool (pack.sh).
#
# Why a worktree: a build in a checkout that is being edited can record an object as newer than
# a header that changed while it compiled, and ninja then keeps the stale object (a Problem
# vtable one slot short crashed `pkb-eval --catalog` on the H200 that way). A worktree of a
# commit never changes under the build.
#   scripts/device/build.sh [commit]     (default HEAD)
set -euo pipefail
cd "$(dirname "$0")/../.."
COMMIT=$(git rev-parse "${1:-HEAD}")
WT=${PKB_GPU_WORKTREE:-/tmp/pkb-gpu-worktree}
if [ -d "$WT" ]; then
  git -C "$WT" checkout -q --detach "$COMMIT"
else
  git worktree add -q --detach "$WT" "$COMMIT"
fi
export CCACHE_BASEDIR=$WT CCACHE_NOHASHDIR=1
cmake -S "$WT" -B "$WT/build-gpu" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DPKB_WITH_SERVICE=ON -DPKB_WITH_CUDA=ON -DPKB_WITH_MPI=OFF -DPKB_BUILD_TESTS=OFF >/dev/null
cmake --build "$WT/build-gpu" -j "${PKB_JOBS:-$(nproc)}"
bash scripts/device/pack.sh "$WT/build-gpu"
echo "$COMMIT" > .carry/COMMIT
echo "packed the GPU build of $COMMIT into .carry/"
