#!/usr/bin/env bash
# The binary wheel on a GPU machine as users have it: no CUDA toolkit, no
# compiler (issue 38). Run as root on the GPU host, from the repository root:
#   bash tests/gpu/wheel_install_check.sh path/to/cachealloc-*.whl
# For the run, the CUDA toolkit and the compilers are hidden: PATH is cut to
# /usr/bin:/bin, CUDA_HOME/CUDA_PATH are unset, /usr/local/cuda* and
# nvcc, g++, c++, gcc, cc (every copy on PATH) are renamed *.hidden-by-check;
# they are put back on exit, whatever happens. Then the wheel is installed
# with pip install --no-deps into a fresh venv that sees the machine's torch
# (--system-site-packages), and it checks:
#   1. `cachealloc doctor` says ready;
#   2. `cachealloc run -- python wheel_step_script.py` is in glue mode
#      ("torch-extension") with a prebuilt glue from the wheel;
#   3. its torch.cuda.memory_stats() equal native's for the same step (every
#      key), native run in its own fresh process.
# Logs and both JSON results go to $OUT (default /tmp/wheel-check). Exit 0
# only when all three hold.
set -uo pipefail
wheel=$(readlink -f "${1:?usage: wheel_install_check.sh WHEEL}")
here=$(cd "$(dirname "$0")" && pwd)
OUT=${OUT:-/tmp/wheel-check}; mkdir -p "$OUT"
python=$(command -v python3)
SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
moved=()
restore() {
  for path in "${moved[@]}"; do $SUDO mv "$path.hidden-by-check" "$path"; done
}
trap restore EXIT
hide() {
  for path in "$@"; do
    if [ -e "$path" ] || [ -L "$path" ]; then
      $SUDO mv "$path" "$path.hidden-by-check" && moved+=("$path")
    fi
  done
}
hide /usr/local/cuda /usr/local/cuda-[0-9]*
for tool in nvcc g++ c++ gcc cc clang clang++; do
  while hash -r && command -v "$tool" >/dev/null 2>&1; do
    hide "$(command -v "$tool")" || break
  done
done
unset CUDA_HOME CUDA_PATH CXX CC CACHEALLOC_LIBRARY CACHEALLOC_TORCH_LIBRARY CACHEALLOC_CLI PYTHONPATH \
  CACHEALLOC_AUTO CACHEALLOC_BACKEND CACHEALLOC_CONF CACHEALLOC_CUDART PYTORCH_CUDA_ALLOC_CONF
export PATH=/usr/bin:/bin CACHEALLOC_CACHE_DIR=$OUT/empty-cache
echo "hidden: ${moved[*]}" | tee "$OUT/hidden.txt"
for tool in nvcc g++ c++ gcc cc; do
  command -v "$tool" >/dev/null && { echo "FAIL: $tool is still on PATH"; exit 1; }
done

# A fresh venv that sees the machine's torch: the site-packages of the
# python3 found first (itself perhaps a venv) are added through a .pth.
venv=$(mktemp -d)/venv
"$python" -m venv --without-pip "$venv" || exit 1
venv_site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
"$python" -c 'import site, sysconfig
print("\n".join(dict.fromkeys([sysconfig.get_paths()["purelib"], *site.getsitepackages()])))' \
  >"$venv_site/machine-site-packages.pth"
# pip comes from the machine's site-packages too; it installs into the venv.
{ "$venv/bin/python" -m pip install --no-deps --no-index "$wheel" \
  || "$python" -m pip --python "$venv/bin/python" install --no-deps --no-index "$wheel"; } \
  >"$OUT/pip.log" 2>&1 || { cat "$OUT/pip.log"; echo "FAIL: pip install --no-deps of the wheel"; exit 1; }
tail -1 "$OUT/pip.log"
export PATH=$venv/bin:$PATH
cd "$(mktemp -d)"  # nothing of a source tree is importable from here
failed=()
cachealloc doctor 2>&1 | tee "$OUT/doctor.txt"
tail -1 "$OUT/doctor.txt" | grep -q "^ready" || failed+=(doctor)
# The two runs at once, one per GPU when there are two (same GPU model).
second=$(nvidia-smi -L | wc -l); [ "$second" -ge 2 ] && second=1 || second=0
CUDA_VISIBLE_DEVICES=0 cachealloc run -- python "$here/wheel_step_script.py" \
  >"$OUT/cachealloc.json" 2>"$OUT/cachealloc.err" &
CUDA_VISIBLE_DEVICES=$second python "$here/wheel_step_script.py" \
  >"$OUT/native.json" 2>"$OUT/native.err"
wait
python - "$OUT/cachealloc.json" "$OUT/native.json" "$venv" <<'PY' || failed+=(step)
import json, sys
ca, native = (json.loads(open(p).read().strip().splitlines()[-1]) for p in sys.argv[1:3])
problems = []
if ca["mode"] != "torch-extension":
    problems.append(f"mode {ca['mode']}, not torch-extension (glue mode)")
if not (ca["cachealloc"] or "").startswith(sys.argv[3]):
    problems.append(f"cachealloc came from {ca['cachealloc']}, not the wheel's venv")
if not (ca["glue"] or "").startswith(sys.argv[3]):
    problems.append(f"glue {ca['glue']} is not the wheel's prebuilt one")
a, b = ca["memory_stats"], native["memory_stats"]
differ = {k: (a.get(k), b.get(k)) for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)}
if differ:
    problems.append(f"{len(differ)} of {len(b)} memory_stats keys differ: {differ}")
print(f"cachealloc: mode {ca['mode']}, glue {ca['glue']}, losses {ca['losses']}")
print(f"native:     losses {native['losses']}")
print(f"memory_stats: {len(b)} keys, {len(differ)} differ")
for p in problems:
    print("FAIL:", p)
sys.exit(1 if problems else 0)
PY
if [ ${#failed[@]} -gt 0 ]; then
  echo "wheel_install_check: FAILED: ${failed[*]}"
  tail -n 5 "$OUT/cachealloc.err" "$OUT/native.err"
  exit 1
fi
echo "wheel_install_check: passed (doctor ready, glue mode, memory_stats equal native's)"
