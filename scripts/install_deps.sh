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

# The zoo's model libraries (benchmarks/zoo/, tests/python/test_predict_zoo.py):
# torchvision, timm and transformers. transformers and timm are pinned to the
# releases the committed GPU truth ran (tests/data/predict/zoo_truth.json;
# before it exists, transformers 5.17.0, the GPU machine's, and timm 1.0.31):
# a release can change a model's code, and so its memory. torchvision is the
# release made for the installed torch (0.N+15 for torch 2.N). When its C ops
# cannot load (a wheel built for another torch build, e.g. a CUDA wheel beside
# the CPU torch), benchmarks/zoo/libs.py declares the two ops its import needs:
# that is the one place handling it. Skipped with CACHEALLOC_NO_ZOO=1.
if [ -z "${CACHEALLOC_NO_ZOO:-}" ] && [ -z "${CACHEALLOC_NO_TORCH:-}" ]; then
  mapfile -t zoo_pins < <(ZOO_TRUTH="$(dirname "$0")/../tests/data/predict/zoo_truth.json" python3 - <<'PY'
import json, os, pathlib, re
from importlib import metadata
import torch
major, minor = (int(x) for x in re.match(r"(\d+)\.(\d+)", torch.__version__).groups())
want = {"torchvision": f"0.{minor + 15}" if major == 2 else None,
        "timm": "1.0.31", "transformers": "5.17.0"}
truth = pathlib.Path(os.environ["ZOO_TRUTH"])
if truth.exists():
    for lib, v in (json.loads(truth.read_text()).get("libraries") or {}).items():
        if lib in ("timm", "transformers") and v:
            want[lib] = v
for lib, v in want.items():
    if v is None:
        continue
    try:
        have = metadata.version(lib)
    except metadata.PackageNotFoundError:
        have = None
    # torchvision: any patch release of the minor made for this torch.
    ok = have is not None and (have.split("+")[0].startswith(v + ".") or have.split("+")[0] == v
                               if lib == "torchvision" else have == v)
    if not ok:
        print(f"{lib}=={v}.*" if lib == "torchvision" else f"{lib}=={v}")
PY
)
  if [ ${#zoo_pins[@]} -gt 0 ]; then
    echo "installing the zoo's libraries: ${zoo_pins[*]}"
    if ! python3 -m pip install -q "${zoo_pins[@]}"; then
      echo "error: the zoo's libraries (${zoo_pins[*]}) could not be installed; without them" \
           "tests/python/test_predict_zoo.py skips its rows. Set CACHEALLOC_NO_ZOO=1 to go without." >&2
      exit 1
    fi
  fi
fi
