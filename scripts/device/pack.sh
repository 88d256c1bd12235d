#!/usr/bin/env bash
# Packs the GPU build (built here, on a CPU machine, with -DPKB_WITH_CUDA=ON) for a GPU node
# that has the same torch wheel but not our Debian libraries: the binaries go to .carry/bin
# and the shared libraries they need that a stock Ubuntu + CUDA + torch image lacks go to
# .carry/lib (gRPC, protobuf, Abseil, ...). .carry/ is git-ignored; the device tool carries it.
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${1:-build-gpu}
rm -rf .carry && mkdir -p .carry/bin .carry/lib
for b in worker/engine/pkb-eval worker/engine/pkb-rank worker/engine/pkb-rank-group \
         server/pkb-coordinator worker/daemon/pkb-worker client/pkb; do
  [ -x "$BUILD/$b" ] && cp "$BUILD/$b" .carry/bin/
done
# The sandbox: GPU images rarely have bubblewrap (util-linux's prlimit and setpriv they have).
cp "$(command -v bwrap)" .carry/bin/
strip --strip-debug .carry/bin/* || true
# Libraries from Debian packages, except the C/C++ runtime, which the node has (newer).
for b in .carry/bin/*; do
  ldd "$b" | awk '/=> \//{print $3}'
done | sort -u | while read -r lib; do
  case "$(basename "$lib")" in
    libc.so*|libm.so*|libpthread.so*|libdl.so*|librt.so*|libstdc++.so*|libgcc_s.so*|ld-linux*) ;;
    libtorch*|libc10*|libcu*|libnvJitLink*|libnccl*|libgomp*|libcrypto*|libssl*|libz.so*|libutil.so*) ;;
    *) cp -L "$lib" .carry/lib/ ;;
  esac
done
du -sh .carry
