#!/usr/bin/env bash
# Submit to verdict through the service on the GPU node (issue 22): bench/eval_latency/service.sh
# with problem 1's example at W = 1, five submissions each with the worker's standby engine and
# without, PKB_LATENCY_GAP (default 3) seconds between a verdict and the next submission.
BIN=$1; OUT=$2
layout=/tmp/pkb-layout-latency
bash scripts/device/make-layout.sh "$BIN" $layout || { echo "SKIPPED"; exit 0; }
# PKB_SERVICELAT_RUNS (default 5): submissions per mode; PKB_LATENCY_COLD=1: cold ones (each
# source new to the compile cache, service.sh).
PKB_BUILD_DIR=$layout PKB_LATENCY_GAP=${PKB_LATENCY_GAP:-3} bash bench/eval_latency/service.sh \
  "${PKB_SERVICELAT_RUNS:-5}" -- --problem 1 --world-size 1 --practice problems/examples/p001_allreduce_symm.cu
