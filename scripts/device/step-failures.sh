#!/usr/bin/env bash
# The launcher's and the device barrier's failure paths on a real GPU.
BIN=$1
exec bash tests/engine/gpu_failures_test.sh "$BIN/pkb-eval" "$PWD"
