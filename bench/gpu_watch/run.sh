#!/usr/bin/env bash
# The GPU watch experiment (watch_probe.cu) on a GPU node: what a judge's spinning kernel sees
# alone, beside its own process's copies, and beside another process's busy, sleeping, copying
# or idle context. Output on stdout.
#   bash bench/gpu_watch/run.sh [build folder]
set -uo pipefail
cd "$(dirname "$0")"
B=${1:-/tmp/gpu_watch}
mkdir -p "$B"
nvcc -O2 -arch=native -o "$B/watch_probe" watch_probe.cu || exit 1
P=$B/watch_probe
nvidia-smi --query-gpu=name,driver_version,compute_mode --format=csv,noheader
nvidia-smi compute-policy -l 2>&1 | head -5
for ms in 50 5 1; do $P watch $ms; done
for i in 1 2 3; do $P watch 50; done
for i in 1 2; do $P watch 50 --copy; done
for other in busy sleepy copy idle; do
  echo "--- beside another process: $other"
  $P $other 3000 & pid=$!
  sleep 0.7
  for ms in 50 5 1; do $P watch $ms; done
  wait $pid
done
