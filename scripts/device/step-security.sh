#!/usr/bin/env bash
# The sandbox on a GPU node: the GPU entries of the adversarial corpus (hidden side-stream work,
# the freed-memory answer, an illegal address, a kernel that never ends), all sandboxed.
BIN=$1
bwrap --version
exec bash tests/adversarial/run_corpus.sh "$BIN/pkb-eval" "$PWD" --gpu
