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
# As on a machine that never ran it: an empty torch header cache, so the
# compile matrix fetches every release's headers from inside pip's isolated
# build environment, through the user's pip configuration (issue 45, 1a).
export CACHEALLOC_TORCH_CACHE="$work/torch_cache"
mkdir -p "$CACHEALLOC_TORCH_CACHE"
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
bash "$repo/scripts/check_wheel_install.sh" "$whl"
echo "check_package: passed in $((SECONDS - start)) s"
