#!/usr/bin/env bash
# Everything that needs a GPU, in one call of the device tool (device time is short):
#   the worked examples' verdicts, the problem-1 evaluation benchmark (cold and warm compile
#   cache), every reference's baseline time at W=1, RNG parity of inputs with Python torch,
#   and the service end to end; functional runs (ranks sharing GPUs) with PKB_DEVICE_STEPS=shared.
#   Logs go to $OUT.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/pkb-out}
mkdir -p "$OUT"
TORCH_DIR=$(python3 -c 'import torch, os; print(os.path.dirname(torch.__file__))')
export LD_LIBRARY_PATH="$PWD/.carry/lib:$TORCH_DIR/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
export PKB_TORCH_INCLUDE="$TORCH_DIR/include"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PATH="/usr/local/cuda/bin:$PATH"
BIN=$PWD/.carry/bin
export PATH="$BIN:$PATH"  # bwrap travels with the binaries
# OpenMPI travels too (build-on-device.sh build: .carry/openmpi): functional runs start their
# ranks with the mpirun on PATH. env.sh adds its bin/ and lib/ and the OPAL_* and PMIX_* variables
# that point Debian's binaries at the relocated tree; pkb-eval's sandbox passes those through.
if [ -f .carry/openmpi/env.sh ]; then
  # shellcheck source=/dev/null
  source .carry/openmpi/env.sh
fi
# The sandbox runs submissions as nobody: it must be able to reach the binaries and libtorch.
bash scripts/sandbox-paths.sh
{
  date -u; echo "binaries of commit $(cat .carry/COMMIT 2>/dev/null || echo unknown)"
  git log -1 --format='tree at commit %H' 2>/dev/null || true
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  nvcc --version | tail -1
  echo "gpus seen by pkb-rank: $($BIN/pkb-rank probe)"
  if command -v mpirun >/dev/null; then
    echo "mpirun: $(command -v mpirun) ($(mpirun --version 2>&1 | head -1))"
  else
    echo "mpirun: none (functional runs need .carry/openmpi: build with build-on-device.sh)"
  fi
} 2>&1 | tee "$OUT/env.txt"

# Only a few files come back from the device tool: the logs are packed into one after every step,
# so that a call cut at its limit still brings back what the finished steps wrote.
# PKB_LOGS_TO (optional) is where the pack and the summary go, when $OUT is a working folder
# outside the device tool's $OUT (a cut call then brings back two files, not every step's).
LOGS_TO=${PKB_LOGS_TO:-$OUT}
mkdir -p "$LOGS_TO"
pack() {
  tar czf /tmp/pkb-logs.tar.gz --exclude=logs.tar.gz -C "$OUT" . && mv /tmp/pkb-logs.tar.gz "$LOGS_TO/logs.tar.gz"
  [ "$LOGS_TO" = "$OUT" ] || cp "$OUT/summary.txt" "$LOGS_TO/summary.txt"
}
# PKB_STEP_TIMEOUT (seconds, optional) bounds each step, so that one slow step cannot take the
# call's whole device time from the steps after it.
for step in ${PKB_DEVICE_STEPS:-bench examples failures security parity baselines service}; do
  echo "=== $step ($(date -u +%T))" | tee -a "$OUT/summary.txt"
  t0=$(date +%s)
  timeout --kill-after=10 "${PKB_STEP_TIMEOUT:-0}" bash scripts/device/step-$step.sh "$BIN" "$OUT" 2>&1 |
    tee "$OUT/$step.log" | tail -40 | tee -a "$OUT/summary.txt"
  rc=${PIPESTATUS[0]}
  [ "$rc" = 124 ] && echo "step $step cut at PKB_STEP_TIMEOUT=${PKB_STEP_TIMEOUT}s" | tee -a "$OUT/summary.txt"
  echo "=== $step: exit $rc in $(( $(date +%s) - t0 )) s" | tee -a "$OUT/summary.txt"
  pack
done
pack
[ "$LOGS_TO" != "$OUT" ] || { find "$OUT" -type f ! -name summary.txt ! -name logs.tar.gz -delete; find "$OUT" -mindepth 1 -type d -empty -delete; }
