#!/usr/bin/env bash
# The service end to end on the GPU node: coordinator + worker + CLI evaluate problem 1's example.
BIN=$1; OUT=$2
layout=/tmp/pkb-layout
rm -rf $layout && mkdir -p $layout/server $layout/worker/daemon $layout/worker/engine $layout/client
ln -s "$BIN/pkb-coordinator" $layout/server/pkb-coordinator
ln -s "$BIN/pkb-worker" $layout/worker/daemon/pkb-worker
ln -s "$BIN/pkb-eval" $layout/worker/engine/pkb-eval
ln -s "$BIN/pkb-rank" $layout/worker/engine/pkb-rank
ln -s "$BIN/pkb" $layout/client/pkb
s=$(date +%s%N)
bash scripts/run-local.sh --build $layout --world-size 1 problems/examples/p001_allreduce_symm.cu
e=$(date +%s%N); echo "service end to end (coordinator start to verdict, cold cache): $(( (e - s) / 1000000 )) ms"
