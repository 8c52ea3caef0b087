#!/usr/bin/env bash
# Issue 33's end-to-end check: an unmodified training script
# (benchmarks/predict/scripts/train_gpt2.py) is predicted through
# `cachealloc predict` on the CPU (no GPU visible), then the same script runs
# on the GPU at the predicted largest batch (it must fit) and at one more (it
# must run out of memory), under native classic and expandable segments.
#
# Run on the device from the repo root (torch + transformers, one GPU):
#   bash benchmarks/predict/unmodified_check.sh [FRACTION] [OUTDIR]
# The memory fraction is applied to the real run by a two-line launcher
# (set_per_process_memory_fraction, then the script as __main__): the script
# itself is untouched. The CUDA driver's own memory is outside the fraction.
set -euo pipefail
cd "$(dirname "$0")/../.."
FRACTION=${1:-0.1653}
OUTDIR=${2:-${OUT:-/tmp/unmodified_check}}
mkdir -p "$OUTDIR"
SCRIPT=benchmarks/predict/scripts/train_gpt2.py
export PYTHONPATH=$PWD/bindings/python${PYTHONPATH:+:$PYTHONPATH}

GPU_NAME=${GPU_NAME:-H200-141GB}
echo "== predicted on the CPU (CUDA_VISIBLE_DEVICES=, $GPU_NAME, fraction $FRACTION)"
start=$(date +%s)
set +e
CUDA_VISIBLE_DEVICES= python3 -m cachealloc.predict.answer.cli --gpu "$GPU_NAME" --memory-fraction "$FRACTION" \
  --largest --start 8 --steps 3 --no-advise --batch-arg=--batch-size --json \
  -- python "$SCRIPT" --steps 1000 > "$OUTDIR/predict.json" 2> "$OUTDIR/predict.err"
rc=$?
set -e
echo "predict exit $rc in $(( $(date +%s) - start )) s"
[ "$rc" -le 1 ] || [ "$rc" -eq 3 ] || { cat "$OUTDIR/predict.err"; exit 2; }   # 3: too close to call (the sizes as predicted are still there)

python3 - "$OUTDIR" "$FRACTION" "$SCRIPT" <<'PY'
import json, os, subprocess, sys, time
out, fraction, script = sys.argv[1], float(sys.argv[2]), sys.argv[3]
ans = json.load(open(os.path.join(out, "predict.json")))
largest = ans["largest"]
print("predicted largest batch:", json.dumps(largest))
launcher = ("import runpy, sys, torch; torch.cuda.set_per_process_memory_fraction(float(sys.argv[1])); "
            "sys.argv = sys.argv[2:]; runpy.run_path(sys.argv[0], run_name='__main__')")
confs = {"classic": "", "expandable": "expandable_segments:True"}
rows = []
for conf, text in confs.items():
    n = largest[conf]
    for batch in (n, n + 1):
        env = dict(os.environ, PYTORCH_ALLOC_CONF=text)
        env.pop("PYTORCH_CUDA_ALLOC_CONF", None)
        t0 = time.time()
        p = subprocess.run([sys.executable, "-c", launcher, str(fraction), script,
                            "--batch-size", str(batch), "--steps", "3"],
                           env=env, capture_output=True, text=True, timeout=600)
        oom = "OutOfMemoryError" in p.stderr or "out of memory" in p.stderr
        fits = p.returncode == 0
        if not fits and not oom:
            print(p.stderr[-3000:])
            raise SystemExit(f"{conf} batch {batch}: failed for a reason other than OOM")
        last = [l for l in p.stdout.splitlines() if l.startswith("step ")][-1:] or [""]
        rows.append(dict(policy=conf, batch=batch, predicted_largest=n, fits=fits, oom=oom,
                         seconds=round(time.time() - t0, 1), last_line=last[0]))
        print(f"{conf:10s} batch {batch:3d} (predicted largest {n}): "
              f"{'fits' if fits else 'OUT OF MEMORY'}  {last[0]}")
ok = all(r["fits"] == (r["batch"] == r["predicted_largest"]) for r in rows)
json.dump(dict(fraction=fraction, predicted=ans, runs=rows, agree=ok),
          open(os.path.join(out, "unmodified_check.json"), "w"), indent=1)
print("prediction and GPU agree" if ok else "PREDICTION AND GPU DISAGREE")
sys.exit(0 if ok else 1)
PY
