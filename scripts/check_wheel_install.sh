#!/usr/bin/env bash
# Checks an installed cachealloc wheel from outside the source tree, as a
# user runs it: `cachealloc doctor`, install(backend="simulated"), the
# `cachealloc` command and the lab from Python, and the no-code-change switch
# (CACHEALLOC_AUTO=1, `cachealloc run`). scripts/check_package.sh calls it
# for the wheel it builds.
#
#   bash scripts/check_wheel_install.sh WHEEL           # fresh venv reusing this machine's torch
#   bash scripts/check_wheel_install.sh WHEEL VENV      # into VENV (a scratch venv holding
#                                                       # another torch, e.g. 2.14.1)
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
whl=$(realpath "$1")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
if [ -n "${2:-}" ]; then
  venv=$(realpath "$2")
  "$venv/bin/python" -m pip install -q --no-deps --force-reinstall "$whl"
else
  venv=$work/venv
  python3 -m venv --system-site-packages "$venv"
  "$venv/bin/python" -m pip install -q --no-deps "$whl"
fi
cd "$work"  # nothing of the source tree is importable from here
export PATH="$venv/bin:$PATH"
unset CACHEALLOC_LIBRARY CACHEALLOC_CLI CACHEALLOC_BUILD PYTHONPATH
trace=$repo/tests/data/traces/mlp.pickle.gz
python -c "import torch; print('check_wheel_install: torch', torch.__version__)"
# A CPU-only torch has no CUDA allocator to replace: install() serves
# cachealloc's own API ("plain"). A CUDA build of torch (such as PyPI's
# 2.14.1, here with no GPU) takes the prebuilt glue for its version, on the
# simulated backend ("torch-extension").
mode=$(python -c "import torch; print('torch-extension' if hasattr(torch._C, '_cuda_customAllocator') else 'plain')")

set -x
# On this CPU machine: not ready for GPU use (exit 1), and it says the lab
# and the simulated backend work.
status=0; cachealloc doctor >"$work/doctor.txt" || status=$?
cat "$work/doctor.txt"
[ "$status" -le 1 ] && tail -1 "$work/doctor.txt" | grep -qE "^ready|lab .* and install\(backend='simulated'\) work here"
python -c "
import cachealloc
cachealloc.install(backend='simulated')
assert cachealloc.mode() == '$mode' and cachealloc.backend().startswith('simulated'), cachealloc.mode()
p = cachealloc._malloc(1 << 20)
assert cachealloc.memory_allocated(0) == 1 << 20
cachealloc._free(p)
print('install(backend=simulated):', cachealloc.mode(), cachealloc.backend())"
cachealloc --help >/dev/null
cachealloc replay "$trace"
python -c "from cachealloc import lab; print(lab.compare('$trace', ['trace', 'max_split_size_mb:128']))"
python -c "import cachealloc, sys; assert cachealloc.__file__.startswith('$venv'), cachealloc.__file__"
# The switch: a program that never imports cachealloc. (On a CPU-only torch
# only the simulated backend installs; it then serves cachealloc's own API.)
child='import sys, torch; ca = sys.modules["cachealloc"]; print("child:", ca.mode(), ca.backend())'
CACHEALLOC_AUTO=1 CACHEALLOC_BACKEND=simulated python -c "$child" | grep "child: $mode simulated"
cachealloc run --backend simulated -- python -c "$child" | grep "child: $mode simulated"
set +x
echo "check_wheel_install: passed"
