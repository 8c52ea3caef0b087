"""Records the GPU's truth for the memory predictor: for each workload in
workloads.py, under native classic and native expandable_segments:True,

- peak allocated / peak reserved / all memory_stats after N training steps
  at the base batches (each a fresh process, history recorded);
- MemTracker's (torch.distributed._tools.mem_tracker) peak for the same
  steps, as the baseline predictor;
- the largest batch under a memory fraction (each probe a fresh process),
  for both policies, and the physical limit: the largest batch whose peak
  ALLOCATED (measured without a fraction) fits in fraction * total memory;
- the bundled small-transformer recording (snapshot with history + its
  .json) for the predictor's CPU test.

Probes run concurrently: several processes per GPU, each with its own
fraction, admitted only while the sum of what they may hold fits the card,
on every visible GPU. Fresh processes are the point: one OOM or one cached
segment must not leak into the next probe.

Usage on the GPU machine:
    python benchmarks/predict/record_truth.py run --out DIR [--workloads a,b]
        [--batches 2,4] [--no-largest] [--no-bundle]
A workload is a builder of workloads.py (WORKLOADS) or an unmodified script
(workloads.SCRIPTS: run as __main__ until its 3rd optimizer step, with the
attention kernel torch picked per call recorded; no MemTracker baseline).
(one worker: `python record_truth.py worker --spec JSON`; the driver starts
these itself.) A spec may name a builder file instead, `"builder":
"FILE.py:NAME"` (as `cachealloc predict --builder` takes it; the zoo's
record.py does), and ask to be gated: run_gated() lets the worker import
(and call the file's preload(NAME)) before it takes its GPU bytes."""
from __future__ import annotations

import argparse
import gzip
import json
import os
import pickle
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from threading import Condition

HERE = os.path.dirname(os.path.abspath(__file__))
CONFS = {"classic": "", "expandable": "expandable_segments:True"}
BASE_BATCHES = (2, 4)
STEPS = 3
TARGET_BATCH = 12      # the fraction is chosen so the physical limit lands near here
GIB = 1 << 30


# --- worker: one fresh process, one measurement -------------------------------------

def load_builder(path_name: str):
    """FILE.py:NAME -> (the module, its builder NAME: a function or a key of
    its WORKLOADS dict), loaded by path as the predictor's worker loads it."""
    import importlib.util
    path, _, name = path_name.rpartition(":")
    spec = importlib.util.spec_from_file_location("_truth_builder", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    build = getattr(mod, name, None) or getattr(mod, "WORKLOADS", {}).get(name)
    if build is None:
        raise SystemExit(f"{path} has no function or WORKLOADS entry {name!r}")
    return mod, build


def library_versions() -> dict:
    """The model libraries' versions as installed (None: not installed)."""
    from importlib import metadata
    out = {}
    for name in ("torchvision", "timm", "transformers"):
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def worker(spec: dict) -> dict:
    import torch
    sys.path.insert(0, HERE)
    import workloads

    build = None
    if spec.get("builder"):  # FILE.py:NAME, as `cachealloc predict --builder` takes it
        mod, build = load_builder(spec["builder"])
        if hasattr(mod, "preload"):  # its slow imports, before the GPU is ours
            mod.preload(spec["builder"].rpartition(":")[2])
    if spec.get("gate"):
        # Gated (run_job): say we are ready, then wait for the GPU to use. The
        # imports above ran without holding any of the driver's GPU memory.
        print("READY", flush=True)
        go = sys.stdin.readline().split()
        if not go or go[0] != "GO":
            raise SystemExit("no GO from the driver")
        # Honoured if nothing imported above initialised the CUDA runtime (a
        # library asking torch.cuda.is_available() does); else pick the card.
        os.environ["CUDA_VISIBLE_DEVICES"] = go[1]
        if torch.cuda.device_count() > 1:
            torch.cuda.set_device(int(go[1]))
    dev = torch.device("cuda", torch.cuda.current_device())
    torch.cuda.init()
    out = {"spec": spec, "torch": torch.__version__,
           "device": torch.cuda.get_device_name(dev),
           "device_total_memory": torch.cuda.get_device_properties(dev).total_memory,
           "alloc_conf": os.environ.get("PYTORCH_ALLOC_CONF", ""),
           "libraries": library_versions()}
    if spec.get("fraction"):
        torch.cuda.set_per_process_memory_fraction(spec["fraction"], dev)
    if spec.get("history"):
        torch.cuda.memory._record_memory_history(max_entries=spec.get("max_entries", 1_000_000),
                                                 stacks="python")
    kwargs = spec.get("kwargs", {})
    t0 = time.time()
    try:
        if build is not None:
            step = build(spec["batch"], device=dev)
            out["attn_implementation"] = getattr(step, "attn_implementation", None)
            # Only a GradScaler skips optimizer steps: other steps run N calls,
            # as the predictor records a builder (N calls of its step).
            scaled = getattr(step, "scaler", None) is not None
            out["step_calls"], out["optimizer_steps"] = until_optimizer_steps(
                step, spec["steps"], spec.get("max_step_calls") if scaled else spec["steps"])
            if scaled and out["optimizer_steps"] < spec["steps"]:
                out["short_of_steps"] = True   # the cap came first: not the step predicted
        elif spec["workload"] in workloads.SCRIPTS:
            out["sdp_choices"] = run_script(spec["workload"], spec["batch"], spec["steps"])
        elif spec.get("memtracker"):
            step = workloads.WORKLOADS[spec["workload"]](spec["batch"], device=dev, **kwargs)
            from torch.distributed._tools.mem_tracker import MemTracker
            mt = MemTracker()
            mt.track_external(step.model, step.optimizer)
            with mt:
                for _ in range(spec["steps"]):
                    step()
                    # per-module stats allow one iteration; the peak survives this
                    mt.reset_mod_stats()
            peak = mt.get_tracker_snapshot("peak")
            out["memtracker_peak"] = {str(d): {str(getattr(k, "value", k)): n for k, n in v.items()}
                                      for d, v in peak.items()}
            out["memtracker_peak_total"] = max(
                v.get("Total", 0) for d, v in peak.items() if str(d).startswith("cuda"))
        else:
            step = workloads.WORKLOADS[spec["workload"]](spec["batch"], device=dev, **kwargs)
            for _ in range(spec["steps"]):
                step()
        torch.cuda.synchronize()
        out["ok"] = True
    except torch.OutOfMemoryError as e:
        out["ok"] = False
        out["oom"] = str(e).splitlines()[0][:300]
    except RuntimeError as e:  # a library's own allocation failure (cuBLAS, cuDNN)
        if "out of memory" not in str(e).lower() and "ALLOC_FAILED" not in str(e):
            raise
        out["ok"] = False
        out["oom"] = "RuntimeError: " + str(e).splitlines()[0][:300]
    out["seconds"] = round(time.time() - t0, 2)
    out["max_memory_allocated"] = torch.cuda.max_memory_allocated()
    out["max_memory_reserved"] = torch.cuda.max_memory_reserved()
    out["memory_stats"] = dict(torch.cuda.memory_stats())
    segs = torch.cuda.memory_snapshot()
    out["segments_expandable"] = sorted({bool(s.get("is_expandable", False)) for s in segs})
    if spec.get("history"):
        snap = torch.cuda.memory._snapshot()
        torch.cuda.memory._record_memory_history(enabled=None)
        raw = pickle.dumps(snap)
        with gzip.open(spec["history"], "wb") as f:
            f.write(raw)
        out["n_events"] = sum(len(t) for t in snap.get("device_traces", []))
    return out


# A GradScaler step that finds inf/NaN gradients skips optimizer.step():
# at the initial scale (2**16) a fp16 step often does, and then no optimizer
# state exists yet (ResNet-50 channels_last fp16 under cudnn.benchmark, SGD
# with momentum, session 27: 3 of 3 steps skipped, no momentum buffer, the
# truth 1.9 % under the predictor's steady step). The predictor calls a builder's
# step() N times, each of which takes its optimizer step on the fake device
# (GradScaler always steps there), so under a GradScaler the truth runs until
# N optimizer steps really ran, as a training job gets there: the scale halves
# per skip, so MAX_EXTRA_CALLS more calls reach 2**4. Other steps run N calls.
MAX_EXTRA_CALLS = 12


def until_optimizer_steps(step, steps: int, max_calls=None) -> tuple:
    """Calls step() until `steps` optimizer steps ran (any optimizer's
    step(), counted by torch's global post hook) or max_calls calls
    (default steps + MAX_EXTRA_CALLS). Returns (calls, optimizer steps)."""
    from torch.optim.optimizer import register_optimizer_step_post_hook
    taken = [0]

    def hook(*_):
        taken[0] += 1
    handle = register_optimizer_step_post_hook(hook)
    calls, limit = 0, max_calls or steps + MAX_EXTRA_CALLS
    try:
        while taken[0] < steps and calls < limit:
            step()
            calls += 1
    finally:
        handle.remove()
    return calls, taken[0]


class _StepsDone(BaseException):
    """After the N-th optimizer step (not an Exception: the script's own
    handlers must not catch it)."""


def run_script(name: str, batch: int, steps: int) -> dict:
    """Runs an unmodified script of workloads.SCRIPTS as __main__ until its
    `steps`-th optimizer.step(), as cachealloc predict records it. Returns
    the attention kernel torch picked per distinct call (torch._fused_sdp_choice,
    a query that allocates nothing), so the prediction's choice can be checked."""
    import runpy
    import torch
    import torch.nn.functional as F
    from torch.optim.optimizer import register_optimizer_step_post_hook
    import workloads
    names = {0: "math", 1: "flash", 2: "efficient", 3: "cudnn", 4: "overrideable"}
    choices = {}
    sdpa = F.scaled_dot_product_attention

    def probe(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
        key = (str(q.dtype), tuple(q.shape), tuple(k.shape), attn_mask is not None, dropout_p > 0,
               is_causal, enable_gqa)
        if str(key) not in choices:
            try:
                c = torch._fused_sdp_choice(q, k, v, attn_mask, dropout_p, is_causal, scale=scale,
                                            enable_gqa=enable_gqa)
                choices[str(key)] = names.get(int(c), str(c))
            except Exception as e:  # recorded, not fatal
                choices[str(key)] = f"unknown ({type(e).__name__})"
        return sdpa(q, k, v, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal,
                    scale=scale, enable_gqa=enable_gqa)

    done = [0]

    def hook(opt, args, kwargs):
        done[0] += 1
        if done[0] >= steps:
            raise _StepsDone()

    handle = register_optimizer_step_post_hook(hook)
    F.scaled_dot_product_attention = probe
    saved_argv = sys.argv
    sys.argv = workloads.script_argv(name, batch)
    try:
        runpy.run_path(sys.argv[0], run_name="__main__")
    except _StepsDone:
        pass
    finally:
        sys.argv = saved_argv
        F.scaled_dot_product_attention = sdpa
        handle.remove()
    return choices


# --- driver -------------------------------------------------------------------------

class Pool:
    """Admits a job to a GPU only while the GPU's committed bytes (the sum of
    what its running jobs may hold, plus a CUDA context each) stay under the
    card's budget, and at most `cpus` jobs run at once. A gated job takes
    its CPU slot first (acquire_cpu) and its GPU bytes later (acquire_gpu)."""

    def __init__(self, ngpu: int, budget: int, cpus: int):
        self.free = [budget] * ngpu
        self.budget = budget
        self.running = 0
        self.cpus = cpus
        self.cv = Condition()

    def acquire(self, need: int) -> int:
        with self.cv:
            while True:
                if self.running < self.cpus:
                    g = max(range(len(self.free)), key=lambda i: self.free[i])
                    if self.free[g] >= need:
                        self.free[g] -= need
                        self.running += 1
                        return g
                self.cv.wait()

    def release(self, g: int, need: int) -> None:
        with self.cv:
            self.free[g] += need
            self.running -= 1
            self.cv.notify_all()

    def acquire_cpu(self) -> None:
        with self.cv:
            while self.running >= self.cpus:
                self.cv.wait()
            self.running += 1

    def release_cpu(self) -> None:
        with self.cv:
            self.running -= 1
            self.cv.notify_all()

    def acquire_gpu(self, need: int) -> int:
        need = min(need, self.budget)  # a job larger than a card runs alone
        with self.cv:
            while True:
                g = max(range(len(self.free)), key=lambda i: self.free[i])
                if self.free[g] >= need:
                    self.free[g] -= need
                    return g
                self.cv.wait()

    def release_gpu(self, g: int, need: int) -> None:
        with self.cv:
            self.free[g] += min(need, self.budget)
            self.cv.notify_all()


def _job_env(spec: dict, gpu=None) -> dict:
    env = dict(os.environ, OMP_NUM_THREADS="2", PYTORCH_ALLOC_CONF=CONFS[spec["conf"]])
    if gpu is not None:
        env["CUDA_VISIBLE_DEVICES"] = str(gpu)
    env.pop("PYTORCH_CUDA_ALLOC_CONF", None)
    return env


def _job_tag(spec: dict) -> str:
    return "{workload}_{conf}_b{batch}_f{fraction}{mt}".format(
        mt="_mt" if spec.get("memtracker") else "", **spec)


def _job_result(spec: dict, stdout: str, stderr: str, returncode, g) -> dict:
    lines = [l for l in stdout.splitlines() if l.startswith("RESULT ")]
    if returncode != 0 or not lines:
        return {"spec": spec, "ok": None, "error": stderr[-2000:], "gpu": g}
    r = json.loads(lines[-1][7:])
    r["gpu"] = g
    return r


def run_gated(pool: Pool, spec: dict, need: int, logdir: str, timeout: float = 200,
              deadline: float = None) -> dict:
    """One worker whose imports (and its builder's preload) run holding a CPU
    slot only; it takes `need` GPU bytes once it says READY. Killed at
    `timeout` seconds after GO or at the absolute time `deadline`, whichever
    comes first (then ok=None with the reason: nothing measured)."""
    spec = dict(spec, gate=True)
    pool.acquire_cpu()
    g = None
    try:
        p = subprocess.Popen([sys.executable, os.path.abspath(__file__), "worker",
                              "--spec", json.dumps(spec)], env=_job_env(spec),
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True)
        first = p.stdout.readline()
        if first.strip() != "READY":
            out, err = p.communicate()
            return _job_result(spec, first + out, err, p.returncode or 1, None)
        g = pool.acquire_gpu(need)
        p.stdin.write(f"GO {g}\n")
        p.stdin.flush()
        left = timeout if deadline is None else min(timeout, deadline - time.time())
        try:
            out, err = p.communicate(timeout=max(left, 0.1))
        except subprocess.TimeoutExpired:
            p.kill()
            out, err = p.communicate()
            why = "deadline" if deadline is not None and time.time() >= deadline else "timeout"
            return {"spec": spec, "ok": None, "error": f"killed at the {why}", "killed": why,
                    "gpu": g}
        with open(os.path.join(logdir, _job_tag(spec) + ".log"), "w") as f:
            f.write(out + "\n--- stderr\n" + err)
        return _job_result(spec, out, err, p.returncode, g)
    finally:
        if g is not None:
            pool.release_gpu(g, need)
        pool.release_cpu()


def run_job(pool: Pool, spec: dict, need: int, logdir: str) -> dict:
    g = pool.acquire(need)
    try:
        p = subprocess.run([sys.executable, os.path.abspath(__file__), "worker",
                            "--spec", json.dumps(spec)], env=_job_env(spec, g),
                           capture_output=True, text=True, timeout=200)
        with open(os.path.join(logdir, _job_tag(spec) + ".log"), "w") as f:
            f.write(p.stdout + "\n--- stderr\n" + p.stderr)
        return _job_result(spec, p.stdout, p.stderr, p.returncode, g)
    finally:
        pool.release(g, need)


def main_run(args) -> None:
    import torch
    global BASE_BATCHES
    sys.path.insert(0, HERE)
    import workloads
    if args.batches:
        BASE_BATCHES = tuple(int(b) for b in args.batches.split(","))
    os.makedirs(args.out, exist_ok=True)
    logdir = os.path.join(args.out, "logs")
    hist = os.path.join(args.out, "history")
    os.makedirs(logdir, exist_ok=True)
    os.makedirs(hist, exist_ok=True)
    ngpu = torch.cuda.device_count()
    total = torch.cuda.get_device_properties(0).total_memory
    name = torch.cuda.get_device_name(0)
    ctx = GIB  # a CUDA context plus cuBLAS/cuDNN handles, counted generously
    pool = Pool(ngpu, total - 3 * GIB, args.cpus)
    ex = ThreadPoolExecutor(max_workers=64)
    names = args.workloads.split(",")
    t0 = time.time()
    result = {"device": name, "device_total_memory": total, "torch": torch.__version__,
              "steps": STEPS, "base_batches": list(BASE_BATCHES), "workloads": {}}

    def submit(spec, need):
        return ex.submit(run_job, pool, spec, need, logdir)

    # Phase A: truth at the base batches (both policies, history kept), MemTracker,
    # and the bundled small recording.
    futs = {}
    for w in names:
        for b in BASE_BATCHES:
            for c in CONFS:
                spec = dict(workload=w, batch=b, conf=c, fraction=None, steps=STEPS,
                            history=os.path.join(hist, f"{w}_{c}_b{b}.pickle.gz")
                            if b == BASE_BATCHES[-1] else None)
                futs[(w, "truth", c, b)] = submit(spec, 12 * GIB)
            if w in workloads.SCRIPTS:
                continue  # MemTracker needs the model and optimizer: builders only
            spec = dict(workload=w, batch=b, conf="classic", fraction=None, steps=STEPS,
                        memtracker=True)
            futs[(w, "memtracker", "classic", b)] = submit(spec, 12 * GIB)
    bundle = {}
    if args.bundle:
        for c in CONFS:
            spec = dict(workload="encoder_small", batch=4, conf=c, fraction=None, steps=STEPS,
                        history=os.path.join(args.out, f"encoder_small_{c}.pickle.gz"),
                        max_entries=200_000)
            bundle[c] = submit(spec, 4 * GIB)
    for w in names:
        R = result["workloads"][w] = {"truth": {c: {} for c in CONFS}, "memtracker": {}}
        for b in BASE_BATCHES:
            for c in CONFS:
                R["truth"][c][str(b)] = futs[(w, "truth", c, b)].result()
            if (w, "memtracker", "classic", b) in futs:
                R["memtracker"][str(b)] = futs[(w, "memtracker", "classic", b)].result()
    for c, f in bundle.items():
        result.setdefault("bundle", {})[c] = f.result()
    print(f"phase A done in {time.time() - t0:.0f} s", flush=True)
    gpu = name.replace("NVIDIA ", "").replace(" ", "_")
    path = os.path.join(args.out, f"predict_truth_{gpu}.json")
    with open(path, "w") as f:  # partial, in case phase B runs out of time
        json.dump(result, f, indent=1, sort_keys=True, default=str)

    if not args.largest:
        result["seconds"] = round(time.time() - t0, 1)
        with open(path, "w") as f:
            json.dump(result, f, indent=1, sort_keys=True, default=str)
        print("wrote", path, flush=True)
        summary(result)
        return

    # Phase B: pick each workload's fraction from the base peaks, then probe a
    # window of batches around the estimated limit (rounds extend the window
    # until every config has a passing batch followed by a failing one).
    plans = {}
    for w in names:
        R = result["workloads"][w]
        t = R["truth"]["classic"]
        a = [t[str(b)].get("max_memory_allocated") for b in BASE_BATCHES]
        if None in a or not all(t[str(b)].get("ok") for b in BASE_BATCHES):
            R["error"] = "base runs failed"
            continue
        slope = (a[1] - a[0]) / (BASE_BATCHES[1] - BASE_BATCHES[0])
        est = lambda b, a0=a[0], s=slope: a0 + s * (b - BASE_BATCHES[0])
        frac = round(est(TARGET_BATCH + 0.5) / total, 4)
        R["fraction"] = frac
        R["limit_bytes"] = int(frac * total)
        R["alloc_per_sample_est"] = slope
        plans[w] = dict(est=est, frac=frac, probes={c: {} for c in ("classic", "expandable", "physical")})

    def probe_spec(w, c, b):
        frac = plans[w]["frac"]
        if c == "physical":
            return dict(workload=w, batch=b, conf="classic", fraction=None, steps=STEPS), \
                int(plans[w]["est"](b) * 1.3) + ctx
        return dict(workload=w, batch=b, conf=c, fraction=frac, steps=STEPS), int(frac * total) + ctx

    def limit(probes):
        """The largest probed batch that fits, if the next batch up was probed
        and does not fit; else None (the window must grow)."""
        bs = sorted(probes)
        for i, b in enumerate(bs):
            if not probes[b]["fits"]:
                if i == 0 or bs[i - 1] != b - 1:
                    return None
                return b - 1
        return None

    todo = {(w, c): list(range(TARGET_BATCH - 4, TARGET_BATCH + 3))
            for w in plans for c in ("classic", "expandable", "physical")}
    for rnd in range(4):
        if not todo:
            break
        fs = {}
        for (w, c), bs in todo.items():
            for b in bs:
                if b >= 1 and b not in plans[w]["probes"][c]:
                    fs[(w, c, b)] = submit(*probe_spec(w, c, b))
        for (w, c, b), f in fs.items():
            r = f.result()
            # Under a fraction, fitting is running without OOM; for the physical
            # limit (run without one) it is peak allocated <= the fraction's bytes.
            r["fits"] = bool(r.get("ok")) and (
                c != "physical" or r["max_memory_allocated"] <= result["workloads"][w]["limit_bytes"])
            plans[w]["probes"][c][b] = r
        nxt = {}
        for (w, c) in todo:
            P = plans[w]["probes"][c]
            if any(P[b].get("ok") is None for b in P):
                continue  # a crashed probe: leave it for the report
            if limit(P) is not None:
                continue
            oks = [b for b in P if P[b]["fits"]]
            bad = [b for b in P if not P[b]["fits"]]
            if not bad:
                nxt[(w, c)] = list(range(max(P) + 1, max(P) + 7))
            elif not oks:
                lo = min(P)
                nxt[(w, c)] = list(range(max(1, lo // 2), lo))
            else:  # a gap: fill every batch between the last pass and first fail
                nxt[(w, c)] = [b for b in range(min(bad), max(oks) + 1) if b not in P] or \
                    list(range(min(bad) - 3, min(bad)))
        todo = nxt
        print(f"phase B round {rnd} done at {time.time() - t0:.0f} s; pending {sorted(todo)}",
              flush=True)
    for w, p in plans.items():
        R = result["workloads"][w]
        R["largest_batch"] = {c: limit(p["probes"][c]) for c in p["probes"]}
        R["probes"] = {c: {str(b): {k: v for k, v in r.items() if k != "memory_stats"}
                           for b, r in sorted(p["probes"][c].items())}
                       for c, P in p["probes"].items()}
    result["seconds"] = round(time.time() - t0, 1)
    with open(path, "w") as f:
        json.dump(result, f, indent=1, sort_keys=True, default=str)
    print("wrote", path, flush=True)
    summary(result)


def summary(result: dict) -> None:
    print(f"{'workload':10} {'conf':10} {'b':>2} {'peak alloc':>14} {'peak reserved':>14} "
          f"{'memtracker':>14}")
    for w, R in result["workloads"].items():
        for c in CONFS:
            for b, r in R["truth"][c].items():
                mt = R["memtracker"].get(b, {}).get("memtracker_peak_total", "")
                print(f"{w:10} {c:10} {b:>2} {r.get('max_memory_allocated', '?'):>14} "
                      f"{r.get('max_memory_reserved', '?'):>14} {mt if c == 'classic' else '':>14}")
        if "largest_batch" in R:
            print(f"{w:10} fraction {R['fraction']} ({R['limit_bytes'] / GIB:.2f} GiB): "
                  f"largest batch {R['largest_batch']}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--out", required=True)
    r.add_argument("--workloads", default="gpt2,resnet50,encoder,llama,vit")
    r.add_argument("--cpus", type=int, default=14)
    r.add_argument("--no-bundle", dest="bundle", action="store_false")
    r.add_argument("--no-largest", dest="largest", action="store_false",
                   help="only the peaks at the base batches (phase A)")
    r.add_argument("--batches", help="the base batches, comma-separated (default 2,4)")
    w = sub.add_parser("worker")
    w.add_argument("--spec", required=True)
    args = ap.parse_args()
    if args.cmd == "worker":
        print("RESULT " + json.dumps(worker(json.loads(args.spec)), default=str), flush=True)
    else:
        main_run(args)


if __name__ == "__main__":
    main()
