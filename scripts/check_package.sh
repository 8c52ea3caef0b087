#!/usr/bin/env bash
# The package as a user gets it: builds the binary wheel the way a plain,
# isolated `pip wheel .` does (torch is neither needed nor downloaded; the
# build needs scikit-build-core from PyPI), gives it its manylinux tag
# (scripts/wheel_manylinux.py), installs it into a fresh venv that reuses
# this machine's torch (--system-site-packages), and checks from outside the
# source tree: `cachealloc doctor`, the `cachealloc` command, the lab from
# Python, install(backend="simulated"), and the no-code-change switch
# (CACHEALLOC_AUTO=1, `cachealloc run`).
# The wheel build is also the COMPILE MATRIX (issue 32): the PyTorch glue
# compiled against the headers of each supported torch release
# (bindings/torch/glue_matrix.cmake; pyproject.toml lists them), so a change
# that breaks the glue for any of them fails here.
# About 6-8 minutes on 2 cores without ccache hits (the glue's four builds
# are most of it), well under a minute with them; ccache is used when
# installed. The same wheel runs on the GPU: tests/gpu/wheel_install_check.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
if [ -z "${CMAKE_CXX_COMPILER_LAUNCHER:-}" ] && command -v ccache >/dev/null; then
  export CMAKE_CXX_COMPILER_LAUNCHER=ccache
fi
start=$SECONDS
python3 -m pip wheel -q --no-deps -w "$work/dist" \
  -C cmake.define.CACHEALLOC_GLUE_MATRIX_REQUIRED=ON "$repo"
echo "check_package: compile matrix and wheel built in $((SECONDS - start)) s"
python3 "$repo/scripts/wheel_manylinux.py" "$work"/dist/*.whl
whl=$(ls "$work"/dist/*.whl)
# CHECK_PACKAGE_WHEEL_DIR=DIR keeps a copy (for tests/gpu/wheel_install_check.sh).
[ -n "${CHECK_PACKAGE_WHEEL_DIR:-}" ] && mkdir -p "$CHECK_PACKAGE_WHEEL_DIR" && cp "$whl" "$CHECK_PACKAGE_WHEEL_DIR/"
echo "check_package: $(basename "$whl"): $(( $(stat -c %s "$whl") / 1024 )) KiB"
# The compile matrix's glues are in it, each for its release.
python3 - "$whl" "$repo/pyproject.toml" <<'PY'
import re, sys, zipfile
versions = re.search(r'CACHEALLOC_GLUE_TORCH_VERSIONS = "(.*)"', open(sys.argv[2]).read()).group(1)
zf = zipfile.ZipFile(sys.argv[1])
for v in versions.split(";"):
    data = zf.read(f"cachealloc/libcachealloc_torch-{v}.so")
    assert v.encode() + b"\0" in data, f"the glue for torch {v} does not say it was built for {v}"
print(f"check_package: compile matrix: glue for torch {', '.join(versions.split(';'))} in the wheel")
PY
python3 -m venv --system-site-packages "$work/venv"
"$work/venv/bin/python" -m pip install -q --no-deps "$whl"
cd "$work"  # nothing of the source tree is importable from here
export PATH="$work/venv/bin:$PATH"
unset CACHEALLOC_LIBRARY CACHEALLOC_CLI CACHEALLOC_BUILD PYTHONPATH
trace=$repo/tests/data/traces/mlp.pickle.gz

set -x
# On this CPU machine: not ready for GPU use (exit 1), and it says the lab
# and the simulated backend work.
status=0; cachealloc doctor >"$work/doctor.txt" || status=$?
cat "$work/doctor.txt"
[ "$status" -le 1 ] && tail -1 "$work/doctor.txt" | grep -qE "^ready|lab .* and install\(backend='simulated'\) work here"
python -c "
import cachealloc
cachealloc.install(backend='simulated')
assert cachealloc.mode() == 'plain' and cachealloc.backend().startswith('simulated'), cachealloc.mode()
p = cachealloc._malloc(1 << 20)
assert cachealloc.memory_allocated(0) == 1 << 20
cachealloc._free(p)
print('install(backend=simulated):', cachealloc.mode(), cachealloc.backend())"
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
