#!/usr/bin/env bash
# The sandbox on a GPU node: the GPU entries of the adversarial corpus (hidden side-stream work,
# the freed-memory answer, an illegal address, a kernel that never ends), all sandboxed.
BIN=$1
# Each entry's rank logs come back in corpus-logs/ (run_corpus.sh's PKB_CORPUS_LOGS).
bwrap --version
PKB_CORPUS_LOGS=$2/corpus-logs exec bash tests/adversarial/run_corpus.sh "$BIN/pkb-eval" "$PWD" --gpu
