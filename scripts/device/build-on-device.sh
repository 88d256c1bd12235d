#!/usr/bin/env bash
# The GPU binaries built on the GPU node itself (16 cores) rather than on a 2-core CPU machine:
# pkb-eval, pkb-rank, pkb-rank-group and problem_cpu_check of one commit, then packed into
# .carry/ for gpu-run.sh.
#
# The node has libtorch (its torch wheel), CUDA, NCCL, cmake and ninja, but none of our Debian
# libraries and no OpenMPI. prepare (here) puts in .devdeps/ (git-ignored, carried by the device
# tool):
#   - the source of one commit (git archive), so the binaries are of that commit exactly;
#   - the Debian packages of Abseil, protobuf, spdlog/fmt, nlohmann-json, CLI11 and the OpenSSL
#     headers, unpacked there into a private prefix (never into /);
#   - in debs-mpi/, Debian's OpenMPI 4.1 with PMIx, hwloc and libevent (openmpi-tree.sh): build
#     makes of them a relocatable tree, .carry/openmpi, that the binaries are built against
#     (PKB_WITH_MPI=ON: functional runs start their ranks with mpirun, and their judges'
#     collectives go over MPI) and that gpu-run.sh puts on PATH (source .carry/openmpi/env.sh);
#   - bubblewrap and the libraries it needs;
#   - service.tgz: the service's binaries as built here (PKB_DEVICE_SERVICE_BUILD, default build/)
#     with their libraries, which build unpacks into .carry/service (make-layout.sh uses them).
#   scripts/device/build-on-device.sh prepare [commit]      here
#   scripts/device/build-on-device.sh build                 there (then gpu-run.sh as usual)
# scripts/device/check-relocated-mpi.sh checks the OpenMPI tree here, with the system's hidden.
set -euo pipefail
cd "$(dirname "$0")/../.."
DEPS=.devdeps
PACKAGES="libabsl-dev libabsl20220623 libprotobuf-dev libprotobuf32 protobuf-compiler libprotoc32
  libspdlog-dev libspdlog1.10 libfmt-dev libfmt9 nlohmann-json3-dev libcli11-dev libssl-dev"

prepare() {
  local commit; commit=$(git rev-parse "${1:-HEAD}")
  # The exclude file of the repository (a worktree's .git is a file; worktrees share this one).
  local exclude; exclude="$(git rev-parse --git-common-dir)/info/exclude"
  grep -qx "/$DEPS/" "$exclude" 2>/dev/null || echo "/$DEPS/" >> "$exclude"
  mkdir -p "$DEPS/debs" "$DEPS/bin" "$DEPS/lib"
  if ! ls "$DEPS"/debs/*.deb >/dev/null 2>&1; then
    # shellcheck disable=SC2086
    (cd "$DEPS/debs" && apt-get download $PACKAGES)
  fi
  bash scripts/device/openmpi-tree.sh download "$DEPS/debs-mpi"
  git archive --format=tar.gz -o "$DEPS/src.tar.gz" "$commit"
  echo "$commit" > "$DEPS/COMMIT"
  cp "$(command -v bwrap)" "$DEPS/bin/"
  ldd "$(command -v bwrap)" | awk '/=> \//{print $3}' | while read -r lib; do
    case "$(basename "$lib")" in libc.so*|ld-linux*) ;; *) cp -L "$lib" "$DEPS/lib/" ;; esac
  done
  pack_service "${PKB_DEVICE_SERVICE_BUILD:-build}"
  du -sh "$DEPS"
  echo "prepared $commit in $DEPS/"
}

# The service's binaries (pkb-coordinator, pkb-worker, pkb) as built here, stripped, with the
# libraries they load that are not the C and C++ runtimes, in $DEPS/service.tgz: the device build
# makes the engine's binaries only, and step-service.sh and step-throughput.sh need these. They
# should be of the same commit: the build folder's binaries are taken as they are (none: skipped).
pack_service() {
  local from=$1 b
  rm -f "$DEPS/service.tgz"
  for b in server/pkb-coordinator worker/daemon/pkb-worker client/pkb; do
    [ -x "$from/$b" ] || { echo "no $from/$b: the service's binaries are not carried"; return 0; }
  done
  local tmp; tmp=$(mktemp -d)
  mkdir -p "$tmp/service/bin" "$tmp/service/lib"
  cp "$from/server/pkb-coordinator" "$from/worker/daemon/pkb-worker" "$from/client/pkb" \
    "$tmp/service/bin/"
  strip --strip-debug "$tmp/service/bin/"*
  for b in "$tmp/service/bin/"*; do ldd "$b" | awk '/=> \//{print $3}'; done | sort -u |
    grep -Ev '/(libc|libm|libstdc\+\+|libgcc_s|libpthread|libdl|librt)\.so|ld-linux' |
    xargs -r -I{} cp -L {} "$tmp/service/lib/"
  tar czf "$DEPS/service.tgz" -C "$tmp" service
  rm -rf "$tmp"
}

# Unpacks $DEPS/service.tgz into .carry/service: each binary in bin/ is a script that runs the
# real one (real/) with the service's libraries first on the library path, and keeps the path it
# was given in PKB_ENGINE_LD_LIBRARY_PATH for the engine the worker starts (make-layout.sh).
unpack_service() {
  [ -f "$DEPS/service.tgz" ] || return 0
  tar xzf "$DEPS/service.tgz" -C .carry
  mkdir -p .carry/service/real
  local b
  for b in pkb-coordinator pkb-worker pkb; do
    mv ".carry/service/bin/$b" ".carry/service/real/$b"
    cat > ".carry/service/bin/$b" <<EOF_WRAP
#!/bin/sh
here=\$(cd "\$(dirname "\$(readlink -f "\$0")")/.." && pwd)
export PKB_ENGINE_LD_LIBRARY_PATH="\${PKB_ENGINE_LD_LIBRARY_PATH-\${LD_LIBRARY_PATH:-}}"
export LD_LIBRARY_PATH="\$here/lib\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
exec "\$here/real/$b" "\$@"
EOF_WRAP
    chmod +x ".carry/service/bin/$b"
  done
}

build() {
  local sr=/tmp/pkb-sysroot src=/tmp/pkb-src
  if [ ! -d "$DEPS/debs-mpi" ]; then
    echo "build: no $DEPS/debs-mpi (OpenMPI's packages): run prepare again on the Debian machine" >&2
    exit 1
  fi
  rm -rf "$sr" "$src" && mkdir -p "$sr" "$src"
  for f in "$DEPS"/debs/*.deb; do dpkg -x "$f" "$sr"; done
  tar xzf "$DEPS/src.tar.gz" -C "$src"
  # OpenMPI where it will run from (the binaries record its include folder for host-only C++
  # candidates, and the engine's sandbox binds the folder above mpirun's bin/), at its real path.
  rm -rf .carry && mkdir -p .carry/bin .carry/lib
  bash scripts/device/openmpi-tree.sh assemble "$DEPS/debs-mpi" .carry/openmpi
  local mpi; mpi=$(cd .carry/openmpi && pwd -P)
  local mpi_args; mapfile -t mpi_args < <(bash scripts/device/openmpi-tree.sh cmake-args "$mpi")
  local lib=$sr/usr/lib/x86_64-linux-gnu
  # protoc; and the linker finds libmpi's own libraries (libopen-pal, PMIx...) there.
  export LD_LIBRARY_PATH="$lib:$mpi/lib:${LD_LIBRARY_PATH:-}"
  local crypto; crypto=$(ls /usr/lib/x86_64-linux-gnu/libcrypto.so.3 /lib/x86_64-linux-gnu/libcrypto.so.3 2>/dev/null | head -1)
  local ssl; ssl=$(ls /usr/lib/x86_64-linux-gnu/libssl.so.3 /lib/x86_64-linux-gnu/libssl.so.3 2>/dev/null | head -1)
  cmake -S "$src" -B "$src/build-gpu" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DPKB_WITH_SERVICE=OFF -DPKB_WITH_CUDA=ON -DPKB_WITH_MPI=ON -DPKB_BUILD_TESTS=OFF \
    -DPKB_WERROR=OFF "${mpi_args[@]}" \
    -DCMAKE_PREFIX_PATH="$sr/usr;$lib/cmake;$sr/usr/share/cmake" \
    -DCMAKE_CXX_FLAGS="-isystem $sr/usr/include -isystem $sr/usr/include/x86_64-linux-gnu" \
    -DProtobuf_INCLUDE_DIR="$sr/usr/include" -DProtobuf_LIBRARY="$lib/libprotobuf.so" \
    -DProtobuf_PROTOC_EXECUTABLE="$sr/usr/bin/protoc" \
    -DOPENSSL_INCLUDE_DIR="$sr/usr/include" -DOPENSSL_CRYPTO_LIBRARY="$crypto" \
    -DOPENSSL_SSL_LIBRARY="$ssl" >/dev/null
  cmake --build "$src/build-gpu" -j "$(nproc)" \
    --target pkb-eval pkb-rank pkb-rank-group problem_cpu_check
  for b in pkb-eval pkb-rank pkb-rank-group; do
    cp "$src/build-gpu/worker/engine/$b" .carry/bin/
  done
  cp "$src/build-gpu/problems/problem_cpu_check" .carry/bin/
  strip --strip-debug .carry/bin/*
  cp "$DEPS"/bin/bwrap .carry/bin/
  cp -L "$DEPS"/lib/* .carry/lib/
  for b in .carry/bin/*; do
    ldd "$b" | awk -v lib="$lib" '$3 ~ "^"lib {print $3}'
  done | sort -u | xargs -r -I{} cp -L {} .carry/lib/
  unpack_service
  cp "$DEPS/COMMIT" .carry/COMMIT
  du -sh .carry
  echo "built $(cat .carry/COMMIT) on $(nproc) cores"
}

case "${1:-}" in
  prepare) shift; prepare "$@" ;;
  build) build ;;
  *) echo "usage: $0 prepare [commit] | build" >&2; exit 2 ;;
esac
