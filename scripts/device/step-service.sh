#!/usr/bin/env bash
# The service end to end on the GPU node: coordinator + worker + CLI evaluate problem 1's example.
BIN=$1; OUT=$2
layout=/tmp/pkb-layout
bash scripts/device/make-layout.sh "$BIN" $layout || { echo "SKIPPED"; exit 0; }
s=$(date +%s%N)
bash scripts/run-local.sh --build $layout --world-size 1 problems/examples/p001_allreduce_symm.cu
e=$(date +%s%N); echo "service end to end (coordinator start to verdict, cold cache): $(( (e - s) / 1000000 )) ms"
