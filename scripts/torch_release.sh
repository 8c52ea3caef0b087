#!/usr/bin/env bash
# Fetches one released torch version's headers and Python sources, for
# compile checks and per-version comparisons against versions that are not
# installed. Uses the macOS arm64 wheel from PyPI: a CPU build of about
# 80 MB whose include/ holds the same c10/cuda and torch/csrc/cuda headers as
# the Linux CUDA wheels (headers are installed whatever the build), and whose
# torch/*.py files are the version's Python API. Nothing is installed.
#
#   bash scripts/torch_release.sh 2.12.0        # prints the extracted root
#
# The extracted tree is cached under $CACHEALLOC_TORCH_CACHE (default
# ~/.cache/cachealloc/torch/VERSION): torch/include/... and torch/**/*.py.
# A second call for the same version downloads nothing.
set -euo pipefail
version=${1:?usage: torch_release.sh VERSION (e.g. 2.12.0)}
case "$version" in
  [0-9]*.[0-9]*.[0-9]*) ;;
  *) echo "torch_release.sh: '$version' is not a release version like 2.12.0" >&2; exit 2 ;;
esac
cache=${CACHEALLOC_TORCH_CACHE:-$HOME/.cache/cachealloc/torch}
root=$cache/$version
if [ ! -f "$root/.complete" ]; then
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  # Wheels from 2.12 on are tagged macosx_14_0. The user's pip configuration
  # (index, proxy, certificate, constraints) applies as to any pip call.
  # Inside pip's isolated build environment (`pip wheel .`) PYTHONPATH and
  # PYTHONNOUSERSITE hide the interpreter's own site-packages, pip included:
  # -I runs the interpreter that runs the build (CACHEALLOC_PYTHON, passed
  # by glue_matrix.cmake) with its own site-packages, ignoring those
  # variables; pip still reads its PIP_* variables and config files.
  py=${CACHEALLOC_PYTHON:-python3}
  if ! "$py" -I -c 'import pip' 2>/dev/null; then
    echo "torch_release.sh: $py has no pip module; pip downloads torch $version's headers" >&2
    exit 2
  fi
  if ! "$py" -I -m pip download --no-deps --only-binary=:all: \
      --platform macosx_11_0_arm64 --platform macosx_14_0_arm64 \
      --python-version 3.12 --implementation cp -d "$tmp" "torch==$version" >"$tmp/pip.err" 2>&1; then
    cat "$tmp/pip.err" >&2
    # A constraint of the user's pip configuration refused this release:
    # name it, and say so with exit 3 (glue_matrix.cmake skips the release).
    refused=$(grep -o 'The user requested (constraint) .*' "$tmp/pip.err" | sed 's/.*(constraint) //' | sort -u | tr '\n' ' ' || true) 
    if [ -n "$refused" ]; then
      where=$("$py" -I -m pip config list 2>/dev/null | grep -i constraint | tr '\n' ' ' || true)
      echo "torch_release.sh: torch $version is refused by the pip configuration's constraint" \
           "${refused% } (${where:-constraint source unknown}); skipped" >&2
      exit 3
    fi
    exit 1
  fi
  rm -rf "$root"
  mkdir -p "$root"
  # Headers and Python sources only: the native libraries are macOS builds.
  unzip -q -o "$tmp"/torch-*.whl 'torch/include/*' 'torch/*.py' 'torch/*.pyi' -d "$root" >&2
  touch "$root/.complete"
fi
echo "$root"
