#!/usr/bin/env bash
# Installs what building and testing cachealloc needs on a Debian machine:
# a C++20 compiler, CMake, Ninja, Abseil, GoogleTest, Google Benchmark, zlib,
# CLI11 (the tool's option parser, header only), pytest, PyTorch's CPU wheel
# and chromium (the lab's HTML report is checked in a headless browser; skip
# with CACHEALLOC_NO_BROWSER=1). Safe to run again: it skips what is already
# there. Fails when something cannot be installed: tests that need it would
# otherwise skip without a word in CI.
set -euo pipefail

need_apt=()
pkgs=(g++ cmake ninja-build libabsl-dev libgtest-dev libgmock-dev libbenchmark-dev zlib1g-dev
      libcli11-dev)
[ -z "${CACHEALLOC_NO_BROWSER:-}" ] && ! command -v chromium >/dev/null && pkgs+=(chromium)
for pkg in "${pkgs[@]}"; do
  dpkg -s "$pkg" >/dev/null 2>&1 || need_apt+=("$pkg")
done
# cmake/ninja from pip count too.
command -v cmake >/dev/null && need_apt=("${need_apt[@]/cmake}")
command -v ninja >/dev/null && need_apt=("${need_apt[@]/ninja-build}")
filtered=()
for p in "${need_apt[@]}"; do [ -n "$p" ] && filtered+=("$p"); done
if [ ${#filtered[@]} -gt 0 ]; then
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  echo "installing: ${filtered[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends \
    "${filtered[@]}" >/dev/null
fi

python3 -c "import pytest" 2>/dev/null || python3 -m pip install -q pytest
# PyTorch (CPU wheel) to build the PyTorch glue against and to test snapshot
# compatibility with torch.cuda._memory_viz. Skipped with CACHEALLOC_NO_TORCH=1.
if [ -z "${CACHEALLOC_NO_TORCH:-}" ] && ! python3 -c "import torch" 2>/dev/null; then
  if ! python3 -m pip install -q torch==2.13.0; then
    echo "error: PyTorch could not be installed; without it the PyTorch glue is not built and" \
         "its tests skip. Install torch, or set CACHEALLOC_NO_TORCH=1 to go without." >&2
    exit 1
  fi
fi
