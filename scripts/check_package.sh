#!/usr/bin/env bash
# The package as a user gets it: builds the wheel the way a plain, isolated
# `pip install .` does (torch is neither needed nor downloaded; the build
# needs scikit-build-core from PyPI), installs it into a fresh venv that
# reuses this machine's torch (--system-site-packages), and checks from
# outside the source tree: the `cachealloc` command, the lab from Python,
# and the no-code-change switch (CACHEALLOC_AUTO=1, `cachealloc run`).
# About 2-3 minutes on 2 cores (the wheel is a Release build of the library
# and the tool only); ccache is used when installed.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
if [ -z "${CMAKE_CXX_COMPILER_LAUNCHER:-}" ] && command -v ccache >/dev/null; then
  export CMAKE_CXX_COMPILER_LAUNCHER=ccache
fi
start=$SECONDS
python3 -m pip wheel -q --no-deps -w "$work/dist" "$repo"
echo "check_package: built $(basename "$work"/dist/*.whl) in $((SECONDS - start)) s"
python3 -m venv --system-site-packages "$work/venv"
"$work/venv/bin/python" -m pip install -q "$work"/dist/*.whl
cd "$work"  # nothing of the source tree is importable from here
export PATH="$work/venv/bin:$PATH"
unset CACHEALLOC_LIBRARY CACHEALLOC_CLI CACHEALLOC_BUILD PYTHONPATH
trace=$repo/tests/data/traces/mlp.pickle.gz

set -x
cachealloc --help >/dev/null
cachealloc replay "$trace"
python -c "from cachealloc import lab; print(lab.compare('$trace', ['trace', 'max_split_size_mb:128']))"
python -c "import cachealloc, sys; assert cachealloc.__file__.startswith('$work/venv'), cachealloc.__file__"
# The switch: a program that never imports cachealloc. (On a CPU-only torch
# only the simulated backend installs; it then serves cachealloc's own API.)
child='import sys, torch; ca = sys.modules["cachealloc"]; print("child:", ca.mode(), ca.backend())'
CACHEALLOC_AUTO=1 CACHEALLOC_BACKEND=simulated python -c "$child" | grep "child: plain simulated"
cachealloc run --backend simulated -- python -c "$child" | grep "child: plain simulated"
set +x
echo "check_package: passed in $((SECONDS - start)) s"
