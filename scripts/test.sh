#!/usr/bin/env bash
# Every test: installs what is missing, builds, runs the C++ suite (ctest)
# and the Python suite (pytest). GPU tests skip on machines without CUDA and
# say why.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh
bash scripts/build.sh
(cd build && ctest --output-on-failure -j"$(nproc)")
python3 -m pytest -q -rs tests/python tests/gpu
