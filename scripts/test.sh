#!/usr/bin/env bash
# Every test: installs what is missing, builds, runs the C++ suite (ctest)
# and the Python suite (pytest). GPU tests skip on machines without CUDA and
# say why. Both suites always run (a failing ctest does not hide pytest's
# results); the script fails if either fails, pytest's "no tests collected"
# (exit 5) included.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh
bash scripts/build.sh
failed=()
(cd build && ctest --output-on-failure -j"$(nproc)") || failed+=(ctest)
python3 -m pytest -q -rs tests/python tests/gpu || failed+=("pytest (exit $?)")
if [ ${#failed[@]} -gt 0 ]; then
  echo "test.sh: FAILED: ${failed[*]}" >&2
  exit 1
fi
echo "test.sh: ctest and pytest passed"
