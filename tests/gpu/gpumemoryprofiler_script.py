"""Runs every code block of the GPUMemoryProfiler usage guide
(tests/data/gpumemoryprofiler_guide_blocks.py), in order, in one namespace,
under one allocator ("cachealloc": installed with the PyTorch glue;
"native": PyTorch's own), then a real training loop against a real leak.

Where a block's profiled call is the only thing in it that allocates, its
ProfileResult is checked against torch.cuda.memory_stats() read around the
block (peak statistics reset just before): under cachealloc every figure
must agree exactly; under native the figures from accumulated counters
must (peaks there come from the profiler's own resets, docs/profiling.md).

    python tests/gpu/gpumemoryprofiler_script.py cachealloc|native
prints one JSON line last; a failed check raises (non-zero exit).
"""
import json
import pathlib
import sys
import time
import warnings

import torch

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "data"))
from gpumemoryprofiler_guide_blocks import BLOCKS  # noqa: E402

# Blocks whose profiled call is the only allocating code in them.
ISOLATED = {"Using context manager", "Understanding profile results", "Peak memory tracking",
            "Error handling", "Advanced: Tensor tracking"}
OUT_BYTES = 32 * 1000 * 4  # one (32, 1000) float32 output: a multiple of 512 B


class Buggy(RuntimeError):
    pass


def assumed_names(kept):
    """The names the guide's blocks use without defining them."""
    def train_epoch(model, dataloader):
        for batch in dataloader:
            model(batch).sum().backward()
        torch.cuda.synchronize()
        time.sleep(0.03)  # an epoch's input wait: monitoring gets to sample

    def my_function():
        x = torch.randn(1024, 1024, device="cuda")  # 4 MiB
        y = x @ x                                   # 4 MiB more, and a matmul workspace
        kept.append(y.sum(dim=0))                   # 4 KiB stays allocated
        return y

    def buggy_function():
        kept.append(torch.ones(256, 1024, device="cuda"))  # 1 MiB stays
        torch.zeros(512, 1024, device="cuda")              # 2 MiB, freed at once
        raise Buggy("buggy_function fails on purpose")

    def create_tensors():
        kept.extend([torch.zeros(1000, device="cuda"), torch.ones(300, 300, device="cuda")])
        torch.empty(2048, device="cuda")  # created and deleted

    return {"train_epoch": train_epoch, "my_function": my_function,
            "buggy_function": buggy_function, "create_tensors": create_tensors,
            "dataloader": [torch.randn(32, 1000, device="cuda") for _ in range(4)]}


def stats():
    torch.cuda.synchronize()
    return torch.cuda.memory_stats(0)


def check_against_stats(title, r, s0, s1, exact):
    """r: the block's only ProfileResult; s0/s1: memory_stats around it."""
    def delta(key):
        return s1[key] - s0[key]

    expect = {
        "memory_allocated": (r.memory_allocated, delta("allocated_bytes.all.allocated")),
        "memory_freed": (r.memory_freed, delta("allocated_bytes.all.freed")),
        "memory_diff()": (r.memory_diff(), delta("allocated_bytes.all.current")),
        "before.allocated_memory": (r.memory_before.allocated_memory,
                                    s0["allocated_bytes.all.current"]),
        "after.allocated_memory": (r.memory_after.allocated_memory,
                                   s1["allocated_bytes.all.current"]),
        "after.reserved_memory": (r.memory_after.reserved_memory, s1["reserved_bytes.all.current"]),
    }
    if r.tensors_created is not None:
        expect["tensors_created"] = (r.tensors_created, delta("allocation.all.allocated"))
        expect["tensors_deleted"] = (r.tensors_deleted, delta("allocation.all.freed"))
    if exact:
        expect["peak_memory_usage()"] = (r.peak_memory_usage(), s1["allocated_bytes.all.peak"])
        expect["memory_peak.reserved_memory"] = (r.memory_peak.reserved_memory,
                                                 s1["reserved_bytes.all.peak"])
        expect["before.reserved_memory"] = (r.memory_before.reserved_memory,
                                            s0["reserved_bytes.all.current"])
        expect["after.active_memory"] = (r.memory_after.active_memory,
                                         s1["active_bytes.all.current"])
        expect["after.inactive_memory"] = (r.memory_after.inactive_memory,
                                           s1["inactive_split_bytes.all.current"])
    wrong = {k: v for k, v in expect.items() if v[0] != v[1]}
    assert not wrong, f"{title}: (profiler, memory_stats) disagree: {wrong}"
    return sorted(expect)


def run_blocks(exact):
    kept = []
    ns = dict(assumed_names(kept))
    report = []
    for title, code in BLOCKS:
        prof = ns.get("profiler")
        known = len(prof.results) if prof is not None else 0
        peak_before = torch.cuda.max_memory_allocated(0)
        if title in ISOLATED:
            torch.cuda.reset_peak_memory_stats(0)
        s0 = stats()
        raised = None
        try:
            exec(compile(code, f"<guide: {title}>", "exec"), ns)
        except Buggy as e:
            raised = e
        s1 = stats()
        assert (raised is not None) == (title == "Error handling"), f"{title}: raised {raised!r}"
        # A block that makes a new profiler: all its results are the block's.
        new = ns["profiler"].results[known if ns["profiler"] is prof else 0:]
        prof = ns["profiler"]
        entry = {"block": title, "new_results": len(new)}
        for r in new:
            assert r.exact == exact, f"{title}: exact={r.exact}"
            assert r.memory_diff() == r.memory_allocated - r.memory_freed, title
            assert r.peak_memory_usage() >= max(r.memory_before.allocated_memory,
                                                r.memory_after.allocated_memory), title
        if title in ISOLATED:
            assert len(new) == 1, f"{title}: {len(new)} results"
            entry["agrees_with_memory_stats"] = check_against_stats(title, new[0], s0, s1, exact)
        if title == "Error handling":
            assert new[0].exception.startswith("Buggy:") and prof.results[-1] is new[0]
        if title == "Continuous monitoring":
            snaps = list(prof.snapshots)
            assert len(snaps) >= 2 and all(s.operation == "monitor" and s.device_id == 0
                                           for s in snaps), len(snaps)
            entry["snapshots"] = len(snaps)
        if title == "Getting profiling summaries":
            s = ns["summary"]
            assert s["total_function_calls"] == len(prof.results) == 1, s  # block 5's call
            assert s["peak_memory_usage"] == max(r.peak_memory_usage() for r in prof.results)
        if title == "Clearing results":
            assert prof.results == [] and len(prof.snapshots) == 0
            assert prof.baseline_snapshot.allocated_memory == s1["allocated_bytes.all.current"]
            # clear_results resets no peak (the guide's would)
            assert torch.cuda.max_memory_allocated(0) == peak_before
        if title == "Advanced: Tensor tracking" and exact:
            assert (new[0].tensors_created, new[0].tensors_deleted) == (3, 1), new[0]
        if title == "Device management":
            assert prof.device == 0
        report.append(entry)
    return report, ns


def check_devices():
    from cachealloc.profiler import GPUMemoryProfiler

    for bad, error in (("cuda:99", ValueError), ("cpu", ValueError), (torch.device("cpu"), ValueError),
                       (1.5, TypeError)):
        try:
            GPUMemoryProfiler(device=bad)
        except error:
            continue
        raise AssertionError(f"device {bad!r} was accepted")


def check_peak_not_reset(exact):
    """Under cachealloc nobody's peak is reset; under native the profiler's
    resets lose the program's peak (the documented approximation)."""
    from cachealloc.profiler import GPUMemoryProfiler

    prof = GPUMemoryProfiler(0)
    big = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    del big
    program_peak = torch.cuda.max_memory_allocated(0)
    r = prof.profile_function(lambda: torch.ones(1 << 20, device="cuda"))
    after = torch.cuda.max_memory_allocated(0)
    assert r.peak_memory_usage() < program_peak
    assert (after == program_peak) == exact, (after, program_peak, exact)
    return after == program_peak


def training(profiler, steps, leak):
    """A real forward/backward loop; with `leak`, every step also keeps its
    output in a list."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(1000, 1000), torch.nn.ReLU(),
                                torch.nn.Linear(1000, 1000)).cuda()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    x = torch.randn(32, 1000, device="cuda")
    history = []
    for _ in range(steps):
        with profiler.profile_context(name="forward"):
            out = model(x)
            loss = out.square().mean()
            if leak:
                history.append(out)
        with profiler.profile_context(name="backward"):
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    return profiler.find_leaks(min_calls=3), (model, opt, history)


def check_loop_vs_leak():
    from cachealloc.profiler import GPUMemoryProfiler

    prof = GPUMemoryProfiler(0, collect_stack_traces=True)
    loop_leaks, keep = training(prof, 6, leak=False)
    forwards = [r for r in prof.results if r.function_name == "forward"]
    assert all(r.memory_diff() > 0 for r in forwards)  # forward keeps activations...
    assert loop_leaks == [], loop_leaks                  # ...but that is no leak
    del keep
    prof.clear_results()
    leaks, keep = training(prof, 6, leak=True)
    starts = [r.memory_before.allocated_memory for r in prof.results if r.function_name == "forward"]
    assert len(leaks) == 1, f"leak not found: {leaks}; forward start levels {starts}"
    leak = leaks[0]
    assert leak.name == "forward" and leak.calls == 6, leak
    assert leak.retained[2:] == [OUT_BYTES] * 4, leak.retained
    site = leak.sites[0]
    assert site.function == "training" and site.bytes >= 5 * OUT_BYTES, leak.sites
    return {"loop_forward_net": [r.memory_diff() for r in forwards], "leak_retained": leak.retained,
            "leak_site": f"{site.function}:{site.line} {site.bytes} B in {site.blocks} blocks"}


def main(mode):
    import cachealloc

    if mode == "cachealloc":
        cachealloc.install()
        assert cachealloc.mode() == "torch-extension", cachealloc.mode()
    else:
        assert mode == "native", mode
        warnings.simplefilter("ignore", RuntimeWarning)  # "NOT exact": expected here
    exact = mode == "cachealloc"
    blocks, _ = run_blocks(exact)
    check_devices()
    out = {"mode": cachealloc.mode(), "exact": exact, "blocks": blocks,
           "peak_kept": check_peak_not_reset(exact), "leaks": check_loop_vs_leak()}
    print(json.dumps(out))


if __name__ == "__main__":
    main(sys.argv[1])
