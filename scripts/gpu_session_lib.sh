# Sourced by the per-session device scripts (scripts/gpu_session2*.sh): the
# part they share. `session_begin NAME DEADLINE` (from the repository root)
# makes an empty /tmp/NAME as R, OUT (default /tmp/out), the clock (left:
# seconds to DEADLINE, or $DEADLINE when set; stamp MSG: a line in
# R/timeline.txt), packs /tmp/NAME into OUT/gpu_NAME.tgz on exit, and notes
# the GPU in R/gpu.txt.
session_begin() {
  R=/tmp/$1; OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; rm -rf "$R"; mkdir -p "$R"
  DEADLINE=${DEADLINE:-$2}; t0=$SECONDS
  PACK_NAME=$1
  trap 'tar czf "$OUT/gpu_$PACK_NAME.tgz" -C /tmp "$PACK_NAME" 2>/dev/null' EXIT
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > "$R/gpu.txt" 2>&1
}
left() { echo $(( DEADLINE - (SECONDS - t0) )); }
stamp() { echo "[$((SECONDS - t0)) s] $*" | tee -a "$R/timeline.txt"; }
# `carry_env` (from the repository root): the environment a device script's
# Python needs to use the carried build (.carry, scripts/carry_build.sh).
# Also puts the carried CLI where the tests' conftest looks for a build
# (/tmp/cbuild, for cpu_pytest), once, before any job runs in the background.
carry_env() {
  export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD/bindings/python:$PWD/benchmarks
  export CACHEALLOC_LIBRARY=$PWD/.carry/lib/libcachealloc.so LD_LIBRARY_PATH=$PWD/.carry/lib:${LD_LIBRARY_PATH:-}
  mkdir -p /tmp/cbuild/tools && cp .carry/bin/cachealloc /tmp/cbuild/tools/
}
# `cpu_pytest SECONDS TEST...`: the tests under this host's own torch (2.11 CPU on
# the GPU machine; no GPU visible), with the carried CLI where conftest looks for
# it (carry_env put it there). Log in R/cpu211.log; a stamp with the exit status.
# Run it in the background beside GPU work: it takes no GPU. With SHARD=K/N set, only the K-th of N
# shares of the tests' names (sorted, every N-th from the K-th; a name's
# parameterizations together), logged in R/cpu211_K.log: N such calls in the
# background run them all in about 1/N of the time.
cpu_pytest() {
  local seconds=$1; shift
  local log="$R/cpu211.log" select=()
  if [ -n "${SHARD:-}" ]; then
    log="$R/cpu211_${SHARD%/*}.log"
    select=(-k "$(python3 - "${SHARD%/*}" "${SHARD#*/}" "$@" <<'PY'
import subprocess, sys
k, n, tests = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3:]
ids = subprocess.run([sys.executable, "-m", "pytest", "-q", "--co", "-p", "no:cacheprovider", *tests],
                     capture_output=True, text=True).stdout.split()
names = sorted({i.split("::")[-1].split("[")[0] for i in ids if "::" in i})
print(" or ".join(name for j, name in enumerate(names) if j % n == k) or "nothing")
PY
)")
  fi
  CACHEALLOC_BUILD=/tmp/cbuild CACHEALLOC_CLI=/tmp/cbuild/tools/cachealloc CUDA_VISIBLE_DEVICES= \
    timeout "$seconds" python3 -m pytest -q -p no:cacheprovider "${select[@]}" "$@" > "$log" 2>&1
  stamp "torch 2.11 CPU tests ${SHARD:+shard $SHARD }rc=$?"
}
# `key_probe KEYDIR SETUP SECONDS`: the key-level cuDNN probe
# (cachealloc.predict.kernels.key_probe) of KEYDIR/SETUP.keys.json (cudnn_keys.py
# writes them on a CPU) into R/keys/SETUP.table.json.gz, cut at SECONDS.
key_probe() {
  mkdir -p "$R/keys"
  timeout "$3" python3 -m cachealloc.predict.kernels.key_probe "$1/$2.keys.json" \
    --out "$R/keys/$2.table.json" > "$R/keys/$2.log" 2>&1
  stamp "key probe $2 rc=$?"
  [ -f "$R/keys/$2.table.json" ] && gzip -f "$R/keys/$2.table.json"
}
# `key_probes KEYDIR SETUP...`: key_probe of each SETUP in the background, each cut
# 25 s before the deadline; their PIDs are appended to the caller's PIDS (its wait).
key_probes() {
  local dir=$1 s
  shift
  for s in "$@"; do
    ( key_probe "$dir" "$s" $(( $(left) - 25 )) ) &
    PIDS+=($!)
  done
}
# `cpu_pytest_shards N SECONDS TEST...`: cpu_pytest in N shards (SHARD=K/N) in the
# background; their PIDs are appended to the caller's PIDS.
cpu_pytest_shards() {
  local n=$1 k
  shift
  for ((k = 0; k < n; k++)); do
    ( SHARD=$k/$n cpu_pytest "$@" ) &
    PIDS+=($!)
  done
}
# `run_answers PLAN DIR JOBS`: each size of a probe_answers.py plan in a fresh
# process under the truth's limit in bytes, into R/DIR (log R/DIR.log), ending
# 35 s before the deadline.
run_answers() {
  timeout $(( $(left) - 25 )) python3 benchmarks/zoo/probe_answers.py run --plan "$1" \
    --out "$R/$2" --jobs "$3" --deadline $(( $(left) - 35 )) > "$R/$2.log" 2>&1
  stamp "$2 rc=$?"
}
# `holdout_truth SETUPS GIB`: record.py's truth of the comma-separated zoo SETUPS
# into R/holdout (log R/holdout.log), GIB of GPU memory for its jobs, ending 30 s
# before the deadline; a stamp with the exit status. Run it in the background.
holdout_truth() {
  timeout $(( $(left) - 20 )) python3 benchmarks/zoo/record.py run --out "$R/holdout" \
    --setups "$1" --cpus 8 --gpu-gib "$2" --deadline $(( $(left) - 30 )) > "$R/holdout.log" 2>&1
  stamp "holdout truth rc=$?"
}
# `gpu_history NAME SETUP BATCH FRACTION`: one classic step of zoo SETUP at BATCH in
# a fresh process under the memory FRACTION its truth row ran under, memory history
# on (record_truth.py worker), into R/history/NAME_classic_bBATCH.{pickle.gz,out,err};
# a stamp with the exit status. Run it first and alone on the GPU.
gpu_history() {
  local base="$R/history/$1_classic_b$3"
  mkdir -p "$R/history"
  local spec="{\"workload\": \"$2\", \"builder\": \"benchmarks/zoo/setups.py:$2\", \"batch\": $3, \"conf\": \"classic\", \"fraction\": $4, \"steps\": 3, \"history\": \"$base.pickle.gz\"}"
  PYTORCH_ALLOC_CONF= OMP_NUM_THREADS=2 timeout 120 python3 benchmarks/predict/record_truth.py worker \
    --spec "$spec" > "$base.out" 2> "$base.err"
  stamp "history $1 b$3 rc=$?"
}
