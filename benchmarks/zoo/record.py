"""Records the GPU truth of the zoo (setups.py): for each setup, in fresh
processes, under native classic and expandable_segments:True,

- phase A, the peaks: max_memory_allocated, max_memory_reserved and all of
  memory_stats() after 3 training steps at the setup's batch (both configs),
  and at half that batch (classic: the slope that places the fraction);
- phase B, the largest batch under a memory fraction chosen per setup so
  that its limit lands at the setup's batch (classic peak reserved at the
  batch plus half a sample's worth), recorded in bytes and as a fraction of
  the card's total memory; found by probing batches around that estimate
  (each probe a fresh process under the fraction: it fits when its 3 steps
  run without an OOM).

Each setup runs its two phases as a pipeline of its own, all setups at
once; the workers are record_truth.py's (builder specs, gated: imports
before GPU memory is taken), admitted side by side under the card's memory. A phase A
job runs under a generous cap (the setup's `gib`), never near it: a job
that hit its cap (an OOM or an allocator retry) is run again with twice the
room. (Under cudnn.benchmark the cap is 8 GiB higher and only a failed
step counts as hitting it: autotuning tries plans against the memory it can
get and catches the OOMs of those that do not fit, so there the peaks are
those of a card with that much room.) Every finished job is kept in OUT/jobs/, so a second run with the same
OUT resumes; --deadline stops the run (killing the jobs in flight, which
are run again next time) and writes what is known.

    python3 benchmarks/zoo/record.py run --out DIR [--setups a,b] [--phase A|all]
        [--deadline SECONDS] [--cpus 14]

Writes DIR/zoo_truth_<GPU>.json (partial until "complete": true) and prints
the table. On the GPU machine: torch 2.11, torchvision, timm, transformers
(the versions are recorded: a model's code, and so its memory, can change
between transformers releases)."""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "predict"))

import record_truth as rt  # noqa: E402
from zoo import setups as S  # noqa: E402
from zoo import probes as P  # noqa: E402

GIB = 1 << 30
CTX = GIB          # a CUDA context with cuBLAS/cuDNN loaded, counted generously
STEPS = 3
BUILDER = os.path.join(HERE, "setups.py")


def small_batch(batch: int) -> int:
    return max(1, batch // 2)


class Jobs:
    """Runs worker specs through record_truth's gated runner, each result
    kept as OUT/jobs/TAG.json (a job killed at the deadline is not kept)."""

    def __init__(self, out: str, cpus: int, deadline: float, timeout: float, card: tuple,
                 gpu_bytes=None):
        """card: (name, total memory in bytes, how many); gpu_bytes: the
        device memory the jobs may hold together (default: all but 3 GiB),
        for a run that shares the card with other work."""
        self.dir = os.path.join(out, "jobs")
        self.logs = os.path.join(out, "logs")
        os.makedirs(self.dir, exist_ok=True)
        os.makedirs(self.logs, exist_ok=True)
        self.name, self.total, ngpu = card
        self.pool = rt.Pool(ngpu, gpu_bytes or self.total - 3 * GIB, cpus)
        self.ex = ThreadPoolExecutor(max_workers=64)
        self.deadline, self.timeout = deadline, timeout

    def spec(self, name: str, conf: str, batch: int, fraction=None) -> dict:
        return dict(workload=name, builder=f"{BUILDER}:{name}", batch=batch, conf=conf,
                    fraction=fraction, steps=STEPS)

    def path(self, spec: dict) -> str:
        return os.path.join(self.dir, rt._job_tag(spec) + ".json")

    def cached(self, spec: dict):
        p = self.path(spec)
        if os.path.exists(p):
            with open(p) as f:
                return json.load(f)
        return None

    def submit(self, spec: dict, need: int):
        """A future of the job's result (the kept one if there is one)."""
        r = self.cached(spec)
        if r is not None:
            return _Done(r)
        return self.ex.submit(self._run, spec, need)

    def _run(self, spec: dict, need: int) -> dict:
        if time.time() >= self.deadline:
            return {"spec": spec, "ok": None, "killed": "deadline", "error": "not started: deadline"}
        r = rt.run_gated(self.pool, spec, need, self.logs, self.timeout, self.deadline)
        r.pop("gate", None)
        if not r.get("killed"):
            with open(self.path(spec), "w") as f:
                json.dump(r, f, default=str)
        return r


class _Done:
    def __init__(self, r):
        self.r = r

    def result(self):
        return self.r


def hit_cap(r: dict, benchmark: bool = False) -> bool:
    """A capped phase A job that came near its cap: its peaks may be the
    cap's doing (an OOM, or cached blocks freed to retry an allocation).
    Under cudnn.benchmark, cuDNN itself tries plans whose workspace may not
    fit and catches the OOM: there only a failed step counts."""
    if benchmark:
        return r.get("ok") is False
    st = r.get("memory_stats") or {}
    return r.get("ok") is False or st.get("num_alloc_retries", 0) > 0 or st.get("num_ooms", 0) > 0


def first_cap(name: str, batch: int) -> int:
    """Phase A's first cap, bytes: the setup's `gib` at its batch (70 % of
    it, at least 2 GiB, at half the batch: the parameters and optimizer
    state do not halve); under cudnn.benchmark 8 GiB more, room for the
    workspaces autotuning tries (it tries each plan against what the
    allocator can get and skips those that OOM)."""
    s = S.SETUPS[name]
    gib = s.gib if batch >= s.batch else max(2.0, 0.7 * s.gib)
    return int((gib + 8 if s.regime.cudnn_benchmark else gib) * GIB)


def peaks_of(jobs: Jobs, name: str) -> dict:
    """Phase A for one setup: {conf: {batch: result}}, each job under a cap
    (first_cap; doubled, up to the card, while the cap was hit)."""
    s = S.SETUPS[name]
    most = jobs.total - 3 * GIB - CTX
    todo = {(c, b): first_cap(name, b) for c, b in (("classic", s.batch), ("expandable", s.batch),
                                                 ("classic", small_batch(s.batch)))}
    out = {}
    while todo:
        futs = {}
        for (c, b), cap in todo.items():
            cap = min(int(cap), most)
            spec = jobs.spec(name, c, b, fraction=round(cap / jobs.total, 6))
            spec["cap"] = True  # a cap for safety, not a limit that is measured
            futs[(c, b)] = (jobs.submit(spec, cap + CTX), cap)
        nxt = {}
        for (c, b), (f, cap) in futs.items():
            r = f.result()
            if r.get("ok") is not None and hit_cap(r, s.regime.cudnn_benchmark) and cap < most:
                nxt[(c, b)] = cap * 2
                print(f"  {name} {c} b{b}: hit its cap of {cap / GIB:.1f} GiB; again with twice",
                      flush=True)
            else:
                out.setdefault(c, {})[str(b)] = r
        todo = nxt if time.time() < jobs.deadline else {}
    return out


def plan_fraction(name: str, peaks: dict, total: int):
    """The fraction whose limit lands at the setup's batch: classic peak
    reserved at the batch plus half a sample (slope from half the batch).
    None when a peak run failed."""
    s = S.SETUPS[name]
    b1, b0 = s.batch, small_batch(s.batch)
    try:
        r1, r0 = peaks["classic"][str(b1)], peaks["classic"][str(b0)]
    except KeyError:
        return None
    bench = s.regime.cudnn_benchmark
    if not (r1.get("ok") and r0.get("ok")) or hit_cap(r1, bench) or hit_cap(r0, bench):
        return None
    slope = (r1["max_memory_reserved"] - r0["max_memory_reserved"]) / max(b1 - b0, 1)
    limit = r1["max_memory_reserved"] + 0.5 * max(slope, 0)
    return {"fraction": round(limit / total, 6), "per_sample_reserved": slope}


def largest_of(jobs: Jobs, name: str, fraction: float) -> dict:
    """Phase B for one setup: {conf: probed batch -> result}, in rounds of
    probes (probes.next_batches) until each config has a fitting batch
    followed by a failing one, a probe crashed, or the deadline."""
    state = {c: {} for c in rt.CONFS}
    need = int(fraction * jobs.total) + CTX
    # Rounds are bounded by the search, not by a count: a resumed run
    # replays its kept jobs in as many rounds as the first run took, and a
    # count (8 before) left a resumed search exactly where it stopped.
    # 32 rounds cover a doubling climb and a bisection of any batch range.
    for _ in range(32):
        futs = {(c, b): jobs.submit(jobs.spec(name, c, b, fraction=fraction), need)
                for c, got in state.items() for b in P.next_batches(got, S.SETUPS[name].batch)}
        if not futs:
            break
        for (c, b), f in futs.items():
            r = f.result()
            if r.get("ok") is None:  # crashed or killed: nothing learned, not probed again
                state[c].setdefault("errors", {})[str(b)] = r.get("error", "")[-300:]
            else:
                state[c][b] = r
        if time.time() >= jobs.deadline:
            break
    return state


def record_setup(jobs: Jobs, name: str, phase: str) -> dict:
    """One setup's row of the truth (both phases, or A alone)."""
    s = S.SETUPS[name]
    peaks = peaks_of(jobs, name)
    R = {"family": s.family, "class": s.cls, "half": S.split()[name], "source": s.source,
         "model": s.model, "regime": s.regime.tags(), "batch": s.batch,
         "peaks": {c: {b: strip(r, keep_stats=True) for b, r in peaks.get(c, {}).items()}
                   for c in rt.CONFS}}
    R["attn_implementation"] = next((r.get("attn_implementation") for c in R["peaks"].values()
                                     for r in c.values() if r.get("attn_implementation")), None)
    if phase != "all":
        return R
    plan = plan_fraction(name, peaks, jobs.total)
    if plan is None:
        R["error"] = "a peak run failed or is missing: no largest-batch search"
        return R
    R.update(fraction=plan["fraction"], limit_bytes=int(plan["fraction"] * jobs.total),
             limit_fraction_of_total=plan["fraction"], per_sample_reserved=plan["per_sample_reserved"])
    for c, got in largest_of(jobs, name, plan["fraction"]).items():
        R.setdefault("largest", {})[c] = P.largest(got)
        R.setdefault("probes", {})[c] = {str(b): strip(r) for b, r in sorted(
            (b, r) for b, r in got.items() if isinstance(b, int))}
        if P.non_monotone(got):
            R.setdefault("non_monotone", {})[c] = P.non_monotone(got)
        if got.get("errors"):
            R.setdefault("probe_errors", {})[c] = got["errors"]
    return R


def row_complete(R: dict, phase: str) -> bool:
    peaks_ran = all(v and all(r.get("ok") is not None for r in v.values())
                    for v in R["peaks"].values())
    searched = phase != "all" or (len(R.get("largest", {})) == len(rt.CONFS) and
                                  all(x is not None for x in R["largest"].values()))
    return not R.get("error") and peaks_ran and searched


def record_zoo(jobs: Jobs, names: list, phase: str, save, torch_version: str) -> dict:
    """Every setup's pipeline (its peaks, then its largest-batch search) at
    once, so one setup's search runs while another's peaks do: the jobs
    share the pool, no phase waits for the slowest setup. save(result) is
    called as each setup ends. A result is complete when every row is."""
    t0 = time.time()
    result = {"device": jobs.name, "device_total_memory": jobs.total, "torch": torch_version,
              "libraries": rt.library_versions(), "steps": STEPS, "complete": False,
              "setups": {}}
    with ThreadPoolExecutor(max_workers=len(names)) as ex:
        futs = {n: ex.submit(record_setup, jobs, n, phase) for n in names}
        for n, f in futs.items():
            result["setups"][n] = f.result()
            R = result["setups"][n]
            print(f"{n}: done at {time.time() - t0:.0f} s"
                  + ("" if row_complete(R, phase) else " (incomplete)"), flush=True)
            save(result)
    result["setups"] = {n: result["setups"][n] for n in names}
    result["complete"] = all(row_complete(R, phase) for R in result["setups"].values())
    result["seconds"] = round(time.time() - t0, 1)
    save(result)
    return result


def main_run(args) -> None:
    import torch
    names = args.setups.split(",") if args.setups else list(S.SETUPS)
    unknown = [n for n in names if n not in S.SETUPS]
    if unknown:
        raise SystemExit(f"unknown setup(s) {unknown}; known: {', '.join(S.SETUPS)}")
    card = (torch.cuda.get_device_name(0), torch.cuda.get_device_properties(0).total_memory,
            torch.cuda.device_count())
    jobs = Jobs(args.out, args.cpus, time.time() + args.deadline, args.job_timeout, card,
                int(args.gpu_gib * GIB) if args.gpu_gib else None)
    gpu = jobs.name.replace("NVIDIA ", "").replace(" ", "_")
    path = os.path.join(args.out, f"zoo_truth_{gpu}.json")
    result = record_zoo(jobs, names, args.phase, lambda r: write(path, r), torch.__version__)
    print("wrote", path, "(complete)" if result["complete"] else
          "(INCOMPLETE: run the same command again to resume)", flush=True)
    print(summary(result))


def strip(r: dict, keep_stats: bool = False) -> dict:
    drop = {"spec"} | (set() if keep_stats else {"memory_stats"})
    out = {k: v for k, v in r.items() if k not in drop}
    out["fraction"] = (r.get("spec") or {}).get("fraction")
    return out


def write(path: str, result: dict) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(result, f, indent=1, sort_keys=True, default=str)
    os.replace(tmp, path)


def summary(result: dict) -> str:
    lines = [f"{'setup':40} {'half':10} {'b':>4} {'classic alloc/res MiB':>22} "
             f"{'expandable alloc/res MiB':>25} {'fraction':>9} {'largest c/e':>11}"]
    for n, R in result["setups"].items():
        b = str(R["batch"])

        def cell(c):
            r = R["peaks"].get(c, {}).get(b) or {}
            if r.get("ok") is None:
                return "error"
            if not r.get("ok"):
                return "OOM"
            return f"{r['max_memory_allocated'] / 2**20:,.0f}/{r['max_memory_reserved'] / 2**20:,.0f}"
        L = R.get("largest", {})
        lines.append(f"{n:40} {R['half']:10} {b:>4} {cell('classic'):>22} {cell('expandable'):>25} "
                     f"{R.get('fraction', '-'):>9} {str(L.get('classic', '-')) + '/' + str(L.get('expandable', '-')):>11}")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--out", required=True)
    r.add_argument("--setups", help="comma-separated (default: all)")
    r.add_argument("--phase", choices=("A", "all"), default="all",
                   help="A: the peaks only; all: the peaks, then the largest batches")
    r.add_argument("--deadline", type=float, default=510.0,
                   help="seconds: stop (killing jobs in flight) and write what is known")
    r.add_argument("--job-timeout", type=float, default=150.0)
    r.add_argument("--cpus", type=int, default=14)
    r.add_argument("--gpu-gib", type=float, help="device memory the jobs may hold together "
                   "(default: the card's less 3 GiB), when other work shares the card")
    args = ap.parse_args()
    main_run(args)


if __name__ == "__main__":
    main()
