#!/usr/bin/env bash
# The nine worked examples at W=1 (and more GPUs where the node has them).
BIN=$1
exec bash tests/engine/gpu_examples_test.sh "$BIN/pkb-eval" "$PWD"
