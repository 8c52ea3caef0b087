#!/usr/bin/env python3
"""A placement policy on the GPU beside native, in one run (issue 36).

    python benchmarks/gpu/policy_gpu.py ab [--policy stitch] [--rounds 2] [--steps 20]
        [--workloads gpt2,resnet50,encoder,multistream,graph] [--serve [--kinds K,..] [--json P]]
    python benchmarks/gpu/policy_gpu.py largest [--policy stitch] [--limit-gib 38]
        [--workload gpt2] [--lo 16] [--hi 40]

`ab`: per workload, the same training loop under native classic, native
expandable_segments:True, cachealloc (native policy, classic) and cachealloc
under the policy, each in a fresh process, alternating A B C D per round.
Prints step time (median of timed steps; median over rounds) and peak
reserved / peak allocated (torch.cuda.memory_stats; cachealloc's glue gives
its own), and the policy's ratios to native's best of the two. Workloads:
gpt2 (GPT-2 small, bf16, batch 8, seq 1024; needs transformers), resnet50
(batch 64), encoder (the predictor's transformer encoder, batch 32),
multistream (two streams: a side stream computes on tensors the main stream
made, record_stream before they are freed), graph (an MLP step captured in a
CUDA graph and replayed, with eager steps around it).

`ab --serve`: the issue-48 form. One persistent process per allocator
(`--kinds`, default native,native_expandable,policy), all set up and
warmed up first; then `--rounds` rounds, each running `--steps` steps in
every process one after another (the order rotating), so that each
round's ratio compares steps taken moments apart. Prints per allocator the
median over rounds of its per-round median step time, and the policy's
per-round ratio to native's best of the two natives (the lower peak
reserved): median, min and max. `--json PATH` writes every figure.
`--device cpu` runs the same plumbing on CPU tensors (tests; no step is a
GPU step there, and the natives do not differ).

`largest`: the largest batch of a workload that trains (3 steps, no OOM)
under a memory limit (set_per_process_memory_fraction = limit / total), one
fresh process per probe, under native classic, native expandable and the
policy; beside the physical limit: the largest batch whose peak ALLOCATED
(native, no limit) fits in the limit. Bisection: physical from --lo (down
to 1 if --lo does not fit, up to --hi if it does), then each allocator at
or below the physical answer (none can train a batch whose peak allocated
exceeds the limit).

Runs from the repo root on a machine with torch (CUDA) and a built
libcachealloc.so (CACHEALLOC_LIBRARY, or build/). No network.
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[2]
KINDS = ["native", "native_expandable", "cachealloc", "policy"]
GIB = 1 << 30


def build_step(workload: str, batch: int):
    import torch
    sys.path.insert(0, str(ROOT / "benchmarks" / "predict"))
    import workloads

    if workload in workloads.WORKLOADS:
        return workloads.WORKLOADS[workload](batch, device="cuda")
    torch.manual_seed(0)
    if workload == "multistream":
        model = torch.nn.Sequential(*[torch.nn.Linear(2048, 2048) for _ in range(8)]).cuda()
        opt = torch.optim.SGD(model.parameters(), lr=1e-3)
        side = torch.cuda.Stream()
        x = torch.randn(batch * 64, 2048, device="cuda")

        def step():
            h = model(x)
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                aux = [(h * (i + 1)).relu() for i in range(4)]  # made and used on the side stream
                s = sum(a.sum() for a in aux)
            for a in aux:
                a.record_stream(side)
            h.record_stream(side)
            torch.cuda.current_stream().wait_stream(side)
            loss = h.square().mean() + 1e-6 * s
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
        return step
    if workload == "graph":
        model = torch.nn.Sequential(torch.nn.Linear(4096, 4096), torch.nn.ReLU(),
                                    torch.nn.Linear(4096, 4096)).cuda()
        opt = torch.optim.SGD(model.parameters(), lr=1e-3)
        x = torch.randn(batch * 16, 4096, device="cuda")
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):  # warm-up on a side stream, as PyTorch's recipe
            for _ in range(3):
                opt.zero_grad(set_to_none=True)
                model(x).square().mean().backward()
                opt.step()
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        opt.zero_grad(set_to_none=True)
        with torch.cuda.graph(g):
            loss = model(x).square().mean()
            loss.backward()
            opt.step()

        def step():
            g.replay()
            extra = torch.randn(batch * 32, 4096, device="cuda")  # eager work beside the graph
            (extra @ extra.T).sum()
        return step
    raise SystemExit(f"unknown workload {workload}")


def child(kind: str, policy: str, workload: str, batch: int, steps: int, warmup: int,
          fraction: float | None) -> dict:
    sys.path.insert(0, str(ROOT / "bindings" / "python"))
    if kind == "native_expandable":
        os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"
    else:
        os.environ.pop("PYTORCH_CUDA_ALLOC_CONF", None)
    import torch

    if kind in ("cachealloc", "policy"):
        import cachealloc

        cachealloc.install(policy=policy if kind == "policy" else "native")
    if fraction:
        torch.cuda.set_per_process_memory_fraction(fraction, 0)
    out = {"kind": kind, "workload": workload, "batch": batch}
    try:
        step = build_step(workload, batch)
        times = []
        for i in range(warmup + steps):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            step()
            torch.cuda.synchronize()
            if i >= warmup:
                times.append(time.perf_counter() - t0)
        out.update(ok=True, step_ms=statistics.median(times) * 1e3)
    except torch.OutOfMemoryError as e:
        out.update(ok=False, oom=str(e).splitlines()[0][:200])
    stats = torch.cuda.memory_stats()
    out.update(peak_reserved=stats.get("reserved_bytes.all.peak", -1),
               peak_allocated=stats.get("allocated_bytes.all.peak", -1),
               device_allocs=stats.get("num_device_alloc", -1),
               device_frees=stats.get("num_device_free", -1),
               retries=stats.get("num_alloc_retries", -1),
               total=torch.cuda.get_device_properties(0).total_memory)
    return out


def setup_kind(kind: str, policy: str, device: str) -> None:
    """PYTORCH_CUDA_ALLOC_CONF and cachealloc for this kind; before CUDA is touched."""
    if kind == "native_expandable":
        os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"
    else:
        os.environ.pop("PYTORCH_CUDA_ALLOC_CONF", None)
    if kind in ("cachealloc", "policy") and device == "cuda":
        sys.path.insert(0, str(ROOT / "bindings" / "python"))
        import cachealloc

        cachealloc.install(policy=policy if kind == "policy" else "native")


def cpu_step(batch: int):
    """A small MLP training step on the CPU: serve's plumbing without a GPU."""
    import torch

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x = torch.randn(batch, 64)

    def step():
        model(x).square().mean().backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    return step


def serve(kind: str, policy: str, workload: str, batch: int, warmup: int, device: str) -> None:
    """Timing worker: set up, warm up, print {"ready": true}; per stdin line
    "run N" run N steps and print {"step_ms": [...]}; "stats" prints the
    peaks; "quit" or EOF ends."""
    setup_kind(kind, policy, device)
    import torch

    cuda = device == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    try:
        step = build_step(workload, batch) if cuda else cpu_step(batch)
        for _ in range(warmup):
            step()
        sync()
    except Exception as e:  # noqa: BLE001 - reported to the driver
        print(json.dumps({"ready": False, "message": f"{type(e).__name__}: {str(e)[:300]}"}), flush=True)
        return
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        cmd = line.split()
        if not cmd or cmd[0] == "quit":
            break
        if cmd[0] == "stats":
            st = torch.cuda.memory_stats() if cuda else {}
            print(json.dumps({"peak_reserved": st.get("reserved_bytes.all.peak", -1),
                              "peak_allocated": st.get("allocated_bytes.all.peak", -1),
                              "device_allocs": st.get("num_device_alloc", -1),
                              "device_frees": st.get("num_device_free", -1),
                              "retries": st.get("num_alloc_retries", -1)}), flush=True)
            continue
        times = []
        try:
            for _ in range(int(cmd[1])):
                sync()
                t0 = time.perf_counter()
                step()
                sync()
                times.append((time.perf_counter() - t0) * 1e3)
        except Exception as e:  # noqa: BLE001
            print(json.dumps({"message": f"{type(e).__name__}: {str(e)[:300]}"}), flush=True)
            return
        print(json.dumps({"step_ms": times}), flush=True)


def ab_serve(a) -> None:
    """ab with persistent processes and alternating rounds (see the docstring)."""
    sys.path.insert(0, str(ROOT / "benchmarks" / "strand"))
    from measure import Worker  # a line-reading process with timeouts

    kinds = a.kinds.split(",")
    for k in kinds:
        if k not in KINDS:
            raise SystemExit(f"--kinds: unknown kind {k!r}: known kinds are {', '.join(KINDS)}")
    if "policy" not in kinds or not {"native", "native_expandable"} & set(kinds):
        raise SystemExit("--kinds: needs policy and at least one of native, native_expandable")
    logs = pathlib.Path(a.json).parent if a.json else pathlib.Path(".")
    results = {"policy": a.policy, "rounds": a.rounds, "steps": a.steps, "warmup": a.warmup,
               "kinds": kinds, "device": a.device, "workloads": {}}
    for w in a.workloads.split(","):
        batch = BATCH.get(w, 16)
        R = results["workloads"][w] = {"batch": batch, "rounds": {k: [] for k in kinds}, "errors": {}}
        workers = {}
        try:
            for k in kinds:  # set up side by side; timed one at a time below
                cmd = [sys.executable, __file__, "child", "--serve", "--kind", k, "--policy", a.policy,
                       "--workload", w, "--batch", str(batch), "--warmup", str(a.warmup),
                       "--device", a.device, "--steps", str(a.steps)]
                workers[k] = Worker(cmd, logs / f"ab_{w}_{k}.log")
            live = []
            for k, wk in workers.items():
                ans = wk.read(a.timeout)
                if ans and ans.get("ready"):
                    live.append(k)
                else:
                    R["errors"][k] = ans or {"message": "no answer"}
            for r in range(a.rounds):
                order = live[r % len(live):] + live[:r % len(live)] if live else []
                for k in order:
                    workers[k].send(f"run {a.steps}")
                    ans = workers[k].read(a.timeout)
                    if not ans or "step_ms" not in ans:
                        R["errors"][k] = ans or {"message": "no answer"}
                        live.remove(k)
                        continue
                    R["rounds"][k].append(statistics.median(ans["step_ms"]))
            R["stats"] = {}
            for k in live:
                workers[k].send("stats")
                R["stats"][k] = workers[k].read(a.timeout) or {}
        finally:
            for wk in workers.values():
                wk.stop()
        natives = [k for k in ("native", "native_expandable") if k in R["stats"]]
        best = min(natives, key=lambda k: (R["stats"][k].get("peak_reserved", -1), natives.index(k))) \
            if natives else None
        R["native_best"] = best
        rs = [p / b for p, b in zip(R["rounds"].get("policy", []), R["rounds"].get(best, [])) if b > 0]
        if rs:
            R["ratio"] = {"median": statistics.median(rs), "min": min(rs), "max": max(rs), "n": len(rs)}
        print(f"\n{w} (batch {batch}), {len(rs)} alternating rounds x {a.steps} steps; policy = {a.policy}")
        print(f"  {'allocator':22s} {'step ms':>9s} {'peak reserved MiB':>18s} {'peak allocated MiB':>19s}"
              f" {'dev allocs':>10s} {'dev frees':>9s} {'retries':>7s}")
        for k in kinds:
            st, ts = R["stats"].get(k, {}), R["rounds"].get(k, [])
            name = f"cachealloc {a.policy}" if k == "policy" else k
            med = f"{statistics.median(ts):9.3f}" if ts else f"{'-':>9s}"
            print(f"  {name:22s} {med} {st.get('peak_reserved', -1) / 2**20:18.1f} "
                  f"{st.get('peak_allocated', -1) / 2**20:19.1f} {st.get('device_allocs', -1):10d} "
                  f"{st.get('device_frees', -1):9d} {st.get('retries', -1):7d}")
        for k, e in R["errors"].items():
            print(f"  {k}: failed: {e.get('message', e)}")
        if rs:
            pr, br = R["stats"]["policy"].get("peak_reserved", -1), R["stats"][best].get("peak_reserved", -1)
            print(f"  {a.policy} / {best} (native's lower peak): step time per round median "
                  f"{R['ratio']['median']:.4f} (min {R['ratio']['min']:.4f}, max {R['ratio']['max']:.4f}), "
                  f"peak reserved {pr / br if br > 0 else float('nan'):.4f}")
        if a.json:
            pathlib.Path(a.json).write_text(json.dumps(results, indent=1))


def spawn(kind, policy, workload, batch, steps, warmup, fraction=None) -> dict:
    cmd = [sys.executable, __file__, "child", "--kind", kind, "--policy", policy, "--workload",
           workload, "--batch", str(batch), "--steps", str(steps), "--warmup", str(warmup)]
    if fraction:
        cmd += ["--fraction", repr(fraction)]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise SystemExit(f"{kind} {workload} batch {batch} failed:\n{p.stderr[-3000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


BATCH = {"gpt2": 8, "resnet50": 64, "encoder": 32, "multistream": 16, "graph": 16}


def ab(a) -> None:
    mib = lambda b: f"{b / 2**20:9.1f}"
    for w in a.workloads.split(","):
        res = {k: [] for k in KINDS}
        for _ in range(a.rounds):
            for k in KINDS:
                res[k].append(spawn(k, a.policy, w, BATCH[w], a.steps, a.warmup))
        print(f"\n{w} (batch {BATCH[w]}), {a.rounds} rounds x {a.steps} steps; policy = {a.policy}")
        print(f"  {'allocator':22s} {'step ms':>9s} {'peak reserved MiB':>18s} {'peak allocated MiB':>19s}"
              f" {'dev allocs':>10s} {'dev frees':>9s} {'retries':>7s}")
        med = {}
        for k, rs in res.items():
            med[k] = statistics.median(r["step_ms"] for r in rs)
            r = rs[-1]
            name = f"cachealloc {a.policy}" if k == "policy" else k
            print(f"  {name:22s} {med[k]:9.3f} {mib(r['peak_reserved']):>18s} {mib(r['peak_allocated']):>19s}"
                  f" {r['device_allocs']:10d} {r['device_frees']:9d} {r['retries']:7d}")
        best = min(("native", "native_expandable"), key=lambda k: res[k][-1]["peak_reserved"])
        print(f"  {a.policy} / {best} (native's lower peak): step time {med['policy'] / med[best]:.4f}, "
              f"peak reserved {res['policy'][-1]['peak_reserved'] / res[best][-1]['peak_reserved']:.4f}; "
              f"floor (peak allocated) {mib(res['policy'][-1]['peak_allocated']).strip()} MiB")


def largest(a) -> None:
    probe = lambda kind, b, frac: spawn(kind, a.policy, a.workload, b, 3, 0, frac)
    total = spawn("native", a.policy, a.workload, a.lo, 1, 0)["total"]
    limit = int(a.limit_gib * GIB)
    frac = limit / total

    def search(fits, lo, hi):
        """The largest b in [1, hi] with fits(b), probing lo first; fits is
        assumed monotone (a batch that fits, every smaller one fits). Returns
        (b, note): b None when even 1 does not fit; note ">=" when hi fits
        (the true largest may lie above the window)."""
        if fits(lo):
            good, bad = lo, hi + 1
        else:
            good, bad = 0, lo  # below the window's start: search down
        while bad - good > 1:
            mid = (good + bad) // 2
            if fits(mid):
                good = mid
            else:
                bad = mid
        if good == 0:
            return None, ""
        return good, (">=" if good == hi else "")

    tried = {}

    def fits(kind, b):
        r = probe("native", b, None) if kind == "physical" else probe(kind, b, frac)
        ok = r["ok"] and (kind != "physical" or r["peak_allocated"] <= limit)
        tried.setdefault(kind, []).append(f"{b}{'+' if ok else '-'}")
        return ok

    out = {"physical": search(lambda b: fits("physical", b), a.lo, a.hi)}
    # No allocator trains a batch whose peak allocated exceeds the limit, so
    # the physical answer bounds the others' window from above.
    top = out["physical"][0] or a.lo
    for kind in ("native", "native_expandable", "policy"):
        out[kind] = search(lambda b, k=kind: fits(k, b), max(1, top - 2), top)
    print(f"\n{a.workload}: largest batch under a {a.limit_gib} GiB limit (fraction {frac:.4f} of "
          f"{total / GIB:.1f} GiB); physical searched from {a.lo} in [1, {a.hi}], the others "
          f"at or below it:")
    for k, (v, note) in out.items():
        name = f"cachealloc {a.policy}" if k == "policy" else k
        print(f"  {name:24s} {note}{v}    probes: {' '.join(tried.get(k, []))}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("child")
    c.add_argument("--kind", choices=KINDS, required=True)
    c.add_argument("--policy", default="stitch")
    c.add_argument("--workload", required=True)
    c.add_argument("--batch", type=int, required=True)
    c.add_argument("--steps", type=int, default=20)
    c.add_argument("--warmup", type=int, default=3)
    c.add_argument("--fraction", type=float)
    c.add_argument("--serve", action="store_true", help="a persistent timing worker (ab --serve)")
    c.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    b = sub.add_parser("ab")
    b.add_argument("--policy", default="stitch")
    b.add_argument("--workloads", default="gpt2,resnet50,encoder,multistream,graph")
    b.add_argument("--rounds", type=int, default=2)
    b.add_argument("--steps", type=int, default=20)
    b.add_argument("--warmup", type=int, default=3)
    b.add_argument("--serve", action="store_true",
                   help="persistent processes, alternating rounds (the issue-48 form)")
    b.add_argument("--kinds", default="native,native_expandable,policy", help="with --serve")
    b.add_argument("--json", default="", help="with --serve: write the figures here")
    b.add_argument("--timeout", type=float, default=300, help="with --serve: seconds per answer")
    b.add_argument("--device", default="cuda", choices=["cuda", "cpu"], help="with --serve")
    l = sub.add_parser("largest")
    l.add_argument("--policy", default="stitch")
    l.add_argument("--workload", default="gpt2")
    l.add_argument("--limit-gib", type=float, default=38.0)
    l.add_argument("--lo", type=int, default=16)
    l.add_argument("--hi", type=int, default=40)
    a = p.parse_args()
    if a.cmd != "child":
        sys.path.insert(0, str(ROOT / "bindings" / "python"))
        import cachealloc

        if a.policy not in cachealloc.policies():
            p.error(f"--policy: unknown policy {a.policy!r}: known policies are "
                    f"{', '.join(cachealloc.policies())}")
    if a.cmd == "child" and a.serve:
        serve(a.kind, a.policy, a.workload, a.batch, a.warmup, a.device)
    elif a.cmd == "child":
        print(json.dumps(child(a.kind, a.policy, a.workload, a.batch, a.steps, a.warmup, a.fraction)))
    elif a.cmd == "ab" and a.serve:
        ab_serve(a)
    elif a.cmd == "ab":
        ab(a)
    else:
        largest(a)


if __name__ == "__main__":
    main()
