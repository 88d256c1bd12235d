#!/usr/bin/env bash
# The build folder's layout (server/, worker/daemon/, worker/engine/, client/) made of links to the
# binaries carried to the device, for the scripts that start the service from a build folder.
#   make-layout.sh BIN DIR
set -euo pipefail
BIN=$1; layout=$2
rm -rf "$layout" && mkdir -p "$layout/server" "$layout/worker/daemon" "$layout/worker/engine" "$layout/client"
ln -s "$BIN/pkb-coordinator" "$layout/server/pkb-coordinator"
ln -s "$BIN/pkb-worker" "$layout/worker/daemon/pkb-worker"
ln -s "$BIN/pkb-eval" "$layout/worker/engine/pkb-eval"
ln -s "$BIN/pkb-rank" "$layout/worker/engine/pkb-rank"
ln -s "$BIN/pkb" "$layout/client/pkb"
