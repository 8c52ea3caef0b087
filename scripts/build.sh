#!/usr/bin/env bash
# Configures and builds everything into build/ (Release with debug info).
# Uses ccache when it is installed (rebuilds of unchanged files then cost
# nothing, also across clones below one CCACHE_BASEDIR).
set -euo pipefail
cd "$(dirname "$0")/.."
launcher=()
if command -v ccache >/dev/null; then
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
  # Paths relative to the checkout (and no build directory in the hash), so
  # a fresh clone reuses what another clone compiled.
  export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$PWD} CCACHE_NOHASHDIR=${CCACHE_NOHASHDIR:-1}
fi
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "${launcher[@]}" >/dev/null
cmake --build build -j"$(nproc)"
